export * from './primitives';
export * from './payer';
export * from './eligibility-check';
