import * as z from 'zod';

/**
 * A setting a timer waits for: Node fires a timer of more than 2^31-1 ms (about 24 days) at once, so
 * a longer one (a month, say) would repeat its work without a pause, or give up a request at once.
 */
export const timerMs = (min: number) => z.number().int().min(min).max(2_147_483_647, { error: 'must be at most 2147483647 (about 24 days), the longest a timer waits' });
