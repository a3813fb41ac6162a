// tap `after` program (see "tap" in package.json): runs once after all test
// files and stops the servers started by start-redis.ts, unless another
// still-running tap run (or a shell that ran start-redis.ts by hand) uses them.
import { stopServers } from './redis-servers.ts';

try {
  await stopServers();
} catch (err) {
  process.stderr.write(`[test-redis] could not stop test Redis servers: ${(err as Error).stack ?? err}\n`);
  process.exitCode = 1;
}
