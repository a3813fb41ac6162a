import type { Socket } from 'node:net';
import type { Cluster, Redis } from 'ioredis';
import type { RedisClient } from './client.ts';
import { atTurnEnd } from './turn-end.ts';

/**
 * Commands sent to Redis in one turn of the event loop leave in one write to its socket.
 *
 * ioredis writes every command to its socket as it is sent: one system call each. When many
 * requests are served at once (sixteen connections each publishing one message, say), each
 * request's script is a write of its own, and on the loopback interface a write is most of what a
 * small request costs: the kernel runs the receiving side's network stack in the writer's call,
 * and Redis wakes up once per command, reads it and answers it in a write of its own. Corking
 * the socket at the first write of a turn and uncorking it when the turn's I/O callbacks are done
 * (turn-end.ts, after the publishes gathered in the turn are sent) sends what those callbacks sent
 * in one writev, which Redis reads at once and answers in one write. A lone command waits only
 * for the rest of its turn: the callbacks already due, never a timer.
 *
 * ioredis offers enableAutoPipelining for a similar purpose, but it gathers commands only until
 * process.nextTick, which runs after each I/O callback, so the commands of requests arriving on
 * different connections are never gathered; and it rebuilds every command into a pipeline.
 */
export function coalesceWrites(client: RedisClient): void {
  if ('isCluster' in client && client.isCluster) {
    (client as Cluster).on('+node', (node: Redis) => coalesceNodeWrites(node));
  } else {
    coalesceNodeWrites(client as Redis);
  }
}

function coalesceNodeWrites(node: Redis): void {
  // Every (re)connection gets a new socket.
  node.on('connect', () => {
    if (node.stream) corkEachTurn(node.stream as Socket);
  });
}

function corkEachTurn(socket: Socket): void {
  let corked = false;
  const uncork = () => {
    corked = false;
    socket.uncork();
  };
  const write = socket.write;
  socket.write = function (this: Socket, ...args: Parameters<Socket['write']>) {
    if (!corked) {
      corked = true;
      socket.cork();
      atTurnEnd(uncork);
    }
    return write.apply(this, args);
  } as Socket['write'];
}
