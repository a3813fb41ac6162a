/**
 * Messages waiting for the handler, in arrival order, with at most one message of each ordering
 * key out at a time: a keyed message waits behind the earlier one of its key until that one is
 * released.
 */
export class HandlerQueue<T extends { key?: string }> {
  /** Ready to go out: unkeyed messages and the head of each key. */
  private ready: T[] = [];
  /** Later messages of a key whose head is ready or out. */
  private readonly behind = new Map<string, T[]>();
  /** Keys with a message ready or out. */
  private readonly busy = new Set<string>();

  push(item: T): void {
    const key = item.key;
    if (key !== undefined) {
      if (this.busy.has(key)) {
        const queue = this.behind.get(key);
        if (queue) queue.push(item);
        else this.behind.set(key, [item]);
        return;
      }
      this.busy.add(key);
    }
    this.ready.push(item);
  }

  /** The next message ready to go out, if any. */
  next(): T | undefined {
    return this.ready.shift();
  }

  /** A message that went out is done with: the next of its key becomes ready, or the key is free. */
  release(item: T): void {
    if (item.key === undefined) return;
    const queue = this.behind.get(item.key);
    const next = queue?.shift();
    if (queue && queue.length === 0) this.behind.delete(item.key);
    if (next) this.ready.push(next);
    else this.busy.delete(item.key);
  }

  /** Takes out the messages waiting behind the head of `key` (the head stays out). */
  dropBehind(key: string): T[] {
    const queue = this.behind.get(key) ?? [];
    this.behind.delete(key);
    return queue;
  }

  /** Takes out every message that has not gone out yet (the subscriber is stopping: nothing is pushed after). */
  drain(): T[] {
    const waiting = [...this.ready, ...[...this.behind.values()].flat()];
    this.ready = [];
    this.behind.clear();
    return waiting;
  }
}
