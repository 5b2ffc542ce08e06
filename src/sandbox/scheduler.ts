/**
 * The sandbox's timers and in-flight work, in one place, so that tests can wait until nothing is
 * pending (settle) and close() leaves no timer or request behind.
 */
export class Scheduler {
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly controller = new AbortController();

  /** Aborted on close(); outgoing requests listen to it. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Runs `fn` after `ms`, unless the scheduler is closed first. */
  later(ms: number, fn: () => void | Promise<void>): void {
    if (this.controller.signal.aborted) return;
    const t = setTimeout(() => {
      this.timers.delete(t);
      this.track(Promise.resolve().then(fn));
    }, ms);
    this.timers.add(t);
  }

  /** Counts `p` as pending work until it settles; its rejection is the caller's to handle. */
  track(p: Promise<unknown>): void {
    const tracked = p.catch(() => undefined);
    this.inFlight.add(tracked);
    void tracked.finally(() => this.inFlight.delete(tracked));
  }

  get busy(): boolean {
    return this.timers.size > 0 || this.inFlight.size > 0;
  }

  /** Resolves once no timer and no tracked work is left (new work started meanwhile included). */
  async settle(pollMs = 5): Promise<void> {
    while (this.busy) {
      if (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
      else await new Promise((r) => setTimeout(r, pollMs));
    }
  }

  close(): void {
    this.controller.abort();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}
