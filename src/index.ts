/**
 * dental-eligibility-sync, the library: import what a sync service needs.
 *   - domain: the EligibilityCheck hub type every adapter produces
 *   - verification: the v2 service client, outcomes, payer catalog, webhook receiver
 *   - adapters: HL7 v2 and FHIR R4 in, CoverageEligibilityResponse out
 *   - the sync service: createEligibilitySync (the durable pipeline: job store, worker, webhook,
 *     FHIR notifications, write-back into the chart), its job stores (openJobStore: SQLite, or
 *     PostgreSQL for several instances), the MLLP listener
 * The embedded service simulator and FHIR server are a separate entry point,
 * `dental-eligibility-sync/sandbox` (src/sandbox-entry.ts).
 */
export * from './domain';
export * from './verification';
export * from './adapters/hl7';
export { loadClinicRouting, resolveClinic, type ClinicRouting, type ClinicHints } from './adapters/clinic-routing';
export { FhirInputError, operationOutcome, type FhirIssue } from './adapters/fhir/operation-outcome';
export * from './adapters/fhir/in';
export * from './adapters/fhir/out';
export { validateR4, assertValidR4 } from './adapters/fhir/validate';
export { fhirWriter, type EligibilityWriter, type ChartRefs, type FhirWriterOptions, type WriteOptions, type WrittenEligibility } from './sync/write-back';
export { ChartWriteError, type ChartIssue } from './sync/chart-errors';
export type { SmartBackendAuth } from './sync/fhir-auth';
export { fhirKitReader, type FhirKitReaderOptions } from './sync/fhir-reader';
export { MllpListener, type MllpListenerOptions, type DeadLetter, type MllpLog, type MllpStats, type Hl7Charset } from './service/mllp-listener';
export { MllpDecoder, frame } from './service/mllp-framing';
export { chartReader, createEligibilitySync, SyncSettings, type EligibilitySync, type EligibilitySyncConfig } from './service/eligibility-sync';
export { startHttpServer, NOTIFICATION_PATH } from './service/http-server';
export { createLogger, type Logger } from './service/logger';
export { SqliteJobStore } from './sync/sqlite-job-store';
export { PgJobStore } from './sync/pg-job-store';
export { openJobStore } from './sync/open-store';
export { CheckState, dismissed, type CheckRow, type AppointmentRow, type MessageRow, type JobStore, type StoreTx } from './sync/job-store';
export { dismissCheck, dismissMessage, retryCheck, replayMessage, type ReplayOptions, type Replayed } from './sync/operations';
export type { SyncEvent, SyncEventName } from './sync/worker';
