import * as z from 'zod';
import { readMappingFile } from '../../mapping-files';
import { baseUrl, BaseUrl } from './base-url';

/**
 * Code and identifier systems, by key (mappings/fhir/systems.json). The other FHIR mapping files
 * name systems by these keys, so a URL is written once. Local systems hang off one base that an
 * operator can move to a canonical they own.
 */
const Url = z.string().min(1);
const LocalSystems = z.strictObject({
  benefitType: Url,
  failureKind: Url,
  failureAction: Url,
  verificationIssue: Url,
  correlationId: Url,
  eligibilityCheck: Url,
  verificationExternalId: Url,
  clinicId: Url,
  hl7PatientId: Url,
  hl7AppointmentId: Url,
  chartCoverage: Url,
});
const ExternalSystems = z.strictObject({
  x12ServiceType: Url,
  exBenefitCategory: Url,
  cdt: Url,
  hl7BenefitType: Url,
  benefitNetwork: Url,
  benefitUnit: Url,
  benefitTerm: Url,
  x12RejectReason: Url,
  subscriberRelationship: Url,
  coverageClass: Url,
  coverageSelfPay: Url,
  identifierType: Url,
  npi: Url,
  taxId: Url,
  ucum: Url,
});
const SystemsFile = z.looseObject({
  base: BaseUrl,
  local: LocalSystems,
  external: ExternalSystems,
});

export type SystemKey = keyof z.infer<typeof LocalSystems> | keyof z.infer<typeof ExternalSystems>;
export const SYSTEM_KEYS = [...Object.keys(LocalSystems.shape), ...Object.keys(ExternalSystems.shape)] as SystemKey[];
export const SystemKeySchema = z.enum(SYSTEM_KEYS as [SystemKey, ...SystemKey[]]);

let file: (z.infer<typeof SystemsFile> & { movedBase: string }) | undefined;
/** The file, and its base with DENTAL_ELIG_FHIR_SYSTEM_BASE over it, read once (systemUrl runs for every coding written). */
function systems(): z.infer<typeof SystemsFile> & { movedBase: string } {
  if (file) return file;
  const read = readMappingFile('fhir/systems.json', SystemsFile);
  return (file = { ...read, movedBase: baseUrl(read.base, 'DENTAL_ELIG_FHIR_SYSTEM_BASE') });
}

export function systemBase(): string {
  return systems().movedBase;
}

/** The URL of a system by key; local ones are resolved against the (overridable) base. */
export function systemUrl(key: SystemKey): string {
  const { local, external } = systems();
  if (key in local) return systemBase() + local[key as keyof typeof local];
  return external[key as keyof typeof external];
}
