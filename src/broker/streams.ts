import { unavailable } from '../errors.ts';
import type { CallContext } from './call-context.ts';
import type { DeliveryService } from './delivery.ts';
import type { ResourceName } from './names.ts';
import { StreamingSession, type StreamTransport } from './streaming.ts';
import type { SubscriptionService } from './subscriptions.ts';

/**
 * The streaming sessions of this node, so that shutdown can end them (clients then reconnect).
 * A closed session stays here until the frames it had received are applied: acks a client sent
 * just before closing still take effect, and shutdown waits for them before Redis goes away.
 */
export class StreamRegistry {
  private readonly sessions = new Set<StreamingSession>();
  /** Set by closeAll: a stream opened after it (a client reconnecting to a node that shuts down) ends at once. */
  private closing = false;

  constructor(
    private readonly delivery: DeliveryService,
    private readonly subscriptions: SubscriptionService,
    readonly heartbeatMs: number,
  ) {}

  /** `name` undefined: the stream's first frame names its subscription. */
  open(caller: CallContext, name: ResourceName | undefined, transport: StreamTransport): StreamingSession {
    const session = new StreamingSession(caller, name, transport, this.delivery, this.subscriptions, {
      heartbeatMs: this.heartbeatMs,
    });
    this.sessions.add(session);
    // After the caller has the session: its transport may name it when it closes.
    if (this.closing) queueMicrotask(() => session.fail(shuttingDown()));
    return session;
  }

  closed(session: StreamingSession): void {
    session.stop();
    void session.drained().then(() => this.sessions.delete(session));
  }

  /** Resolves once every closed session has applied the frames it received. */
  async settled(): Promise<void> {
    await Promise.all([...this.sessions].map((session) => session.drained()));
  }

  /** Ends every stream with UNAVAILABLE, which official clients treat as "reconnect". */
  async closeAll(): Promise<void> {
    this.closing = true;
    for (const session of this.sessions) session.fail(shuttingDown());
    await this.settled();
    this.sessions.clear();
  }
}

const shuttingDown = () => unavailable('The server is shutting down; reconnect.');
