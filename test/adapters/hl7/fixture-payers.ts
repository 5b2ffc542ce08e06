import type { PayerResolution, PayerResolver } from '../../../src/domain';

/**
 * A small payer resolver for the adapter tests (the real catalog lives in src/verification).
 * Two Delta Dental plans share one common payer id, as real ones do, so the corpus has an
 * ambiguous resolution as well as resolved and unknown ones.
 */
const PAYERS = [
  { primaryPayerId: 'DDCA01', commonPayerId: 'CDCA1', name: 'Delta Dental of California', syncPortals: ['prt_delta_ca'], asyncPortals: ['prt_delta_ca'] },
  { primaryPayerId: 'DDMI01', commonPayerId: 'DDPMI', name: 'Delta Dental of Michigan', syncPortals: ['prt_delta_mi'], asyncPortals: [] },
  { primaryPayerId: 'DDOH01', commonPayerId: 'DDPMI', name: 'Delta Dental of Ohio', syncPortals: ['prt_delta_mi'], asyncPortals: [] },
  { primaryPayerId: 'METL01', commonPayerId: '65978', name: 'MetLife', syncPortals: ['prt_metlife'], asyncPortals: ['prt_metlife'] },
  { primaryPayerId: 'CIGN01', commonPayerId: '62308', name: 'Cigna', syncPortals: ['prt_cigna'], asyncPortals: [] },
  { primaryPayerId: 'AETN01', commonPayerId: '60054', name: 'Aetna', syncPortals: ['prt_aetna'], asyncPortals: ['prt_aetna'] },
  { primaryPayerId: 'GUAR01', commonPayerId: '64246', name: 'Guardian', syncPortals: [], asyncPortals: ['prt_guardian'] },
];

export const fixturePayers: PayerResolver = {
  resolve({ name, id }): PayerResolution {
    const byId = id ? PAYERS.filter((p) => p.commonPayerId === id.trim()) : [];
    if (byId.length > 1) {
      return {
        status: 'ambiguous',
        matchedBy: 'commonPayerId',
        candidates: byId.map((p) => ({ primaryPayerId: p.primaryPayerId, commonPayerId: p.commonPayerId, name: p.name })),
      };
    }
    const byName = name ? PAYERS.filter((p) => p.name.toUpperCase() === name.trim().toUpperCase()) : [];
    const [match, matchedBy] = byId[0] ? [byId[0], 'commonPayerId' as const] : [byName[0], 'name' as const];
    if (!match) return { status: 'unknown' };
    return {
      status: 'resolved',
      matchedBy,
      primaryPayerId: match.primaryPayerId,
      commonPayerId: match.commonPayerId,
      name: match.name,
      syncPortals: match.syncPortals,
      asyncPortals: match.asyncPortals,
      supportsAsync: match.asyncPortals.length > 0,
    };
  },
};
