export { checksFromBundle, type FhirInputOptions } from './from-bundle';
export { checksFromServer, type FhirReader } from './checks-from-server';
