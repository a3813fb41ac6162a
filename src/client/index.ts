// A small typed client for the broker: publish over REST, subscribe over streaming pull
// (WebSocket). No Node-only APIs: it runs in browsers and in Node 20 (pass the 'ws' package's
// WebSocket there). Served as an ES module bundle at GET /client/pubsub-client.js.
export { PubSubClient } from './client.ts';
export { Subscriber } from './subscriber.ts';
export type { MessageHandler } from './leases.ts';
export { Message } from './message.ts';
export { PubSubError, HandlerError, isRetryableCloseCode } from './errors.ts';
export type {
  AckResponse,
  FetchLike,
  PubSubClientOptions,
  PublishMessage,
  SubscribeOptions,
  SubscriberState,
  SubscriptionProperties,
  WebSocketConstructor,
  WebSocketLike,
} from './types.ts';
