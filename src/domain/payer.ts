import * as z from 'zod';

/**
 * What a payer catalog made of a payer as the PMS named it. A common payer id can cover several
 * plans: that is reported as ambiguous, never guessed.
 */
export const PayerMatch = z.enum(['name', 'commonPayerId', 'alternatePayerId', 'alias']);
export type PayerMatch = z.infer<typeof PayerMatch>;

export const PayerCandidate = z.strictObject({
  primaryPayerId: z.string(),
  commonPayerId: z.string().optional(),
  name: z.string(),
});
export type PayerCandidate = z.infer<typeof PayerCandidate>;

export const PayerResolution = z.discriminatedUnion('status', [
  z.strictObject({
    status: z.literal('resolved'),
    matchedBy: PayerMatch,
    primaryPayerId: z.string(),
    /** The id a verification request names the payer by (never the primary id). */
    commonPayerId: z.string().optional(),
    name: z.string(),
    syncPortals: z.array(z.string()),
    asyncPortals: z.array(z.string()),
    supportsAsync: z.boolean(),
  }),
  z.strictObject({
    status: z.literal('ambiguous'),
    matchedBy: PayerMatch,
    candidates: z.array(PayerCandidate).min(2),
  }),
  z.strictObject({ status: z.literal('unknown') }),
]);
export type PayerResolution = z.infer<typeof PayerResolution>;

/** Implemented by the payer catalog (src/verification); adapters take it as an option. */
export interface PayerResolver {
  resolve(payer: { name?: string | undefined; id?: string | undefined }): PayerResolution;
}
