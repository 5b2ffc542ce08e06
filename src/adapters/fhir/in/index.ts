export { checksFromBundle, type FhirInputOptions } from './from-bundle';
export { checksFromServer, fhirKitReader, type FhirKitReaderOptions, type FhirReader } from './from-server';
