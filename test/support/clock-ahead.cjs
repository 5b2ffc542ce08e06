/**
 * Preloaded into a process (NODE_OPTIONS=--require): its wall clock (Date) runs CLOCK_AHEAD_MS
 * ahead of this machine's, as a host's whose clock is off; its monotonic clock is as it was, as
 * a clock's error or an NTP step leaves it.
 */
const ahead = Number(process.env.CLOCK_AHEAD_MS);
if (!Number.isFinite(ahead)) throw new Error('clock-ahead.cjs: CLOCK_AHEAD_MS must be a number of milliseconds');
const RealDate = Date;
class AheadDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(RealDate.now() + ahead);
    else super(...args);
  }
  static now() {
    return RealDate.now() + ahead;
  }
}
globalThis.Date = AheadDate;
