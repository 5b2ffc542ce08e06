import * as z from 'zod';
import { describeIssue } from '../../domain/issues';
import { readMappingFile } from '../../mapping-files';

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
const Base = z.url({ error: 'must be an absolute URL' });
const SystemsFile = z.looseObject({
  base: Base,
  local: LocalSystems,
  external: ExternalSystems,
});

export type SystemKey = keyof z.infer<typeof LocalSystems> | keyof z.infer<typeof ExternalSystems>;
export const SYSTEM_KEYS = [...Object.keys(LocalSystems.shape), ...Object.keys(ExternalSystems.shape)] as SystemKey[];
export const SystemKeySchema = z.enum(SYSTEM_KEYS as [SystemKey, ...SystemKey[]]);

let file: z.infer<typeof SystemsFile> | undefined;
const systems = () => (file ??= readSystems());

/**
 * The file, with DENTAL_ELIG_FHIR_SYSTEM_BASE over its base: read once, as the file is (systemUrl
 * runs for every coding written), and checked as the file's base is, naming the variable only.
 */
function readSystems(): z.infer<typeof SystemsFile> {
  const read = readMappingFile('fhir/systems.json', SystemsFile);
  const override = process.env.DENTAL_ELIG_FHIR_SYSTEM_BASE;
  if (override === undefined) return read;
  const base = Base.safeParse(override);
  if (!base.success) throw new Error(describeIssue(base.error, 'DENTAL_ELIG_FHIR_SYSTEM_BASE'));
  return { ...read, base: base.data };
}

export function systemBase(): string {
  const { base } = systems();
  return base.endsWith('/') ? base : `${base}/`;
}

/** The URL of a system by key; local ones are resolved against the (overridable) base. */
export function systemUrl(key: SystemKey): string {
  const { local, external } = systems();
  if (key in local) return systemBase() + local[key as keyof typeof local];
  return external[key as keyof typeof external];
}
