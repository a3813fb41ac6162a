import { unavailable } from '../errors.ts';
import type { DeliveryService } from './delivery.ts';
import type { ResourceName } from './names.ts';
import { StreamingSession, type StreamTransport } from './streaming.ts';
import type { SubscriptionService } from './subscriptions.ts';
import type { Wakeups } from './wakeups.ts';

/** The streaming sessions of this node, so that shutdown can end them (clients then reconnect). */
export class StreamRegistry {
  private readonly sessions = new Set<StreamingSession>();

  constructor(
    private readonly delivery: DeliveryService,
    private readonly subscriptions: SubscriptionService,
    private readonly wakeups: Wakeups,
    readonly heartbeatMs: number,
  ) {}

  open(name: ResourceName, transport: StreamTransport): StreamingSession {
    const session = new StreamingSession(name, transport, this.delivery, this.subscriptions, this.wakeups, {
      heartbeatMs: this.heartbeatMs,
    });
    this.sessions.add(session);
    return session;
  }

  closed(session: StreamingSession): void {
    session.stop();
    this.sessions.delete(session);
  }

  /** Ends every stream with UNAVAILABLE, which official clients treat as "reconnect". */
  closeAll(): void {
    for (const session of this.sessions) session.fail(unavailable('The server is shutting down; reconnect.'));
    this.sessions.clear();
  }
}
