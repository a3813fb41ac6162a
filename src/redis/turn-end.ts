/**
 * Work to run once the I/O callbacks of this turn of the event loop are done: one setImmediate
 * per turn runs every task in order, and a task added meanwhile runs in the same one. Publishes
 * gathered in the turn are sent from here (calls/publish-batch.ts), and the Redis sockets corked
 * in the turn are uncorked after them (coalesced-writes.ts), so the commands go out in the same
 * turn as the requests that made them: two setImmediates would put the uncork of a socket corked
 * by the first one's writes in the next turn.
 */
const tasks: (() => void)[] = [];

export function atTurnEnd(task: () => void): void {
  tasks.push(task);
  if (tasks.length === 1) setImmediate(runTasks);
}

function runTasks(): void {
  // `tasks` may grow while it runs: those run too.
  for (let i = 0; i < tasks.length; i++) {
    try {
      tasks[i]();
    } catch (error) {
      // The rest still run (a socket left corked would hold its commands forever); the error
      // surfaces as any uncaught one.
      queueMicrotask(() => {
        throw error;
      });
    }
  }
  tasks.length = 0;
}
