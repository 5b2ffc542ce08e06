import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/**
 * How busy this process's event loop has been lately (0 to 1), read over windows of at least
 * `windowMs`: the share of the time it spent running code rather than waiting for I/O. The
 * worker takes new checks only while there is room left, so what arrives (MLLP messages,
 * webhook deliveries) is still read and answered when the checks in hand keep the CPU busy.
 */
export class LoopHeadroom {
  private mark: EventLoopUtilization = performance.eventLoopUtilization();
  private last = 0;

  constructor(private readonly windowMs = 100) {}

  busy(): number {
    const now = performance.eventLoopUtilization();
    const window = performance.eventLoopUtilization(now, this.mark);
    // A shorter window says little (one long callback is all of it): the last full window stands.
    if (window.idle + window.active < this.windowMs) return this.last;
    this.mark = now;
    this.last = window.utilization;
    return this.last;
  }
}
