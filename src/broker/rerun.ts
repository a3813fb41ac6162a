/**
 * A background task that runs on request: at once, or, when a run is under way, once more after
 * it (however many requests came meanwhile), so that every request is served by a run that
 * started after it. `run` handles its own errors; nothing runs once `stopped()` says so.
 */
export class Rerun {
  private running?: Promise<void>;
  private again = false;

  constructor(
    private readonly run: () => Promise<void>,
    private readonly stopped: () => boolean,
  ) {}

  request(): Promise<void> {
    if (this.stopped()) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.run();
      } while (this.again && !this.stopped());
    })().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Resolves when the run under way, if any, has ended. */
  async settled(): Promise<void> {
    await this.running;
  }
}
