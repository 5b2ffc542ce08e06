/** How long after a warning said once a spell the next of its kind is said at debug. */
export const SPELL_MS = 10 * 60_000;

/**
 * A warning that would come at every check for as long as its cause lasts (a service asking for
 * fewer requests, results coming by polling): true when it is to be said at warn now, and then
 * false for SPELL_MS, where it is said at debug.
 */
export function onceASpell(now: () => number): () => boolean {
  let saidAt = Number.NEGATIVE_INFINITY;
  return () => {
    const at = now();
    // Said before a clock stepped back (NTP): the spell is over, or its warnings would stay at debug for as long as the step, an hour or a day, too.
    if (at >= saidAt && at - saidAt < SPELL_MS) return false;
    saidAt = at;
    return true;
  };
}
