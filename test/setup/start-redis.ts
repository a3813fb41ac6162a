// tap `before` program (see "tap" in package.json): runs once per `tap`
// invocation, before any test file, and makes sure a standalone Redis and a
// 3-master Redis Cluster are up for the tests. See redis-servers.ts for how
// reuse, concurrent runs and leftovers from crashed runs are handled.
//
// Also usable by hand to keep servers up across many tap runs:
//   node --import=tsx test/setup/start-redis.ts   # ...later: stop-redis.ts
import { startServers } from './redis-servers.ts';

try {
  await startServers();
} catch (err) {
  process.stderr.write(`[test-redis] could not start test Redis servers: ${(err as Error).stack ?? err}\n`);
  // A non-zero exit makes tap abort the run instead of failing every test.
  process.exitCode = 1;
}
