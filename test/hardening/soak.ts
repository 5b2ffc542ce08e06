/**
 * npm test runs the hardening tests short; `npm run soak` (HARDEN_SOAK=1) runs them at full size:
 * 10,000 fuzzed messages, a minute of webhooks at 200 a second, faults that last a minute.
 */
export const SOAK = process.env.HARDEN_SOAK === '1';

/** The test's size: the soak's, or the short one npm test runs. */
export const sized = (short: number, soak: number) => (SOAK ? soak : short);
