import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/**
 * How busy this process's event loop has been lately (0 to 1), read over windows of at least
 * `windowMs`: the share of the time it spent running code rather than waiting for I/O. The
 * worker takes new checks only while there is room left, so what arrives (MLLP messages,
 * webhook deliveries) is still read and answered when the checks in hand keep the CPU busy.
 */
export class LoopHeadroom {
  private mark: EventLoopUtilization;
  private last = 0;

  /** `read` is the loop's running totals; tests give their own, as the real loop's share of a window depends on what else the machine runs. */
  constructor(
    private readonly windowMs = 100,
    private readonly read: () => EventLoopUtilization = performance.eventLoopUtilization,
  ) {
    this.mark = read();
  }

  busy(): number {
    const now = this.read();
    const window = { idle: now.idle - this.mark.idle, active: now.active - this.mark.active };
    // A shorter window says little (one long callback is all of it): the last full window stands.
    if (window.idle + window.active < this.windowMs) return this.last;
    this.mark = now;
    this.last = window.active / (window.idle + window.active);
    return this.last;
  }
}
