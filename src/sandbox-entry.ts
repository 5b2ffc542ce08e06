/**
 * dental-eligibility-sync/sandbox: the embedded stand-ins, kept out of the library's main entry
 * so that importing the library loads neither the simulator nor @medplum/fhir-router.
 *   - startSandbox: the simulator of the verification service v2
 *   - startFhirServer / createFhirHandler: the embedded FHIR R4 server, standalone or mounted
 */
export * from './sandbox';
export {
  createFhirHandler,
  FHIR_BASE_PATH,
  startFhirServer,
  type ChartStore,
  type FhirHandler,
  type FhirHandlerOptions,
  type FhirServer,
  type FhirServerOptions,
} from './sandbox/fhir-server';
