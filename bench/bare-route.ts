/**
 * The floor of a small request: a bare Fastify route that runs one EVALSHA of a one-line script
 * (INCR of one key) and answers a publish-sized JSON body. The small-requests workload serves it
 * from this child process (its CPU is read like the broker's) against the run's Redis, and drives
 * it exactly as it drives the broker's one-message publishes: what a request costs beyond this is
 * the broker's own work.
 *
 * Environment: BARE_REDIS_URL. Tells its port to the parent over IPC once it listens.
 */
import Fastify from 'fastify';
import { Redis } from 'ioredis';

const redis = new Redis(process.env.BARE_REDIS_URL!);
const sha = (await redis.script('LOAD', "return redis.call('INCR', KEYS[1])")) as string;
const app = Fastify();
app.post('/bare', async () => {
  const counter = await redis.evalsha(sha, 1, 'bench-bare-route');
  return { messageIds: [String(counter)] };
});
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
process.send!({ port: typeof address === 'object' && address ? address.port : 0 });
process.on('disconnect', () => process.exit(0));
