export * from './primitives';
export * from './payer';
export * from './eligibility-check';
export * from './patient-insurance-store';
export * from './issues';
