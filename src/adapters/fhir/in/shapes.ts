/**
 * The parts of FHIR R4 resources the inbound adapter reads, as zod schemas: input comes from
 * another system, so a field of the wrong JSON type is reported naming the element, never a
 * crash. Permissive (loose objects), because an EHR's resources carry much we do not read.
 */
import * as z from 'zod';
import type { FhirIssue } from '../operation-outcome';

const Str = z.string();

export const Coding = z.looseObject({ system: Str.optional(), code: Str.optional(), display: Str.optional() });
export const CodeableConcept = z.looseObject({ coding: z.array(Coding).optional(), text: Str.optional() });
export type CodeableConcept = z.infer<typeof CodeableConcept>;

export const Identifier = z.looseObject({
  use: Str.optional(),
  type: CodeableConcept.optional(),
  system: Str.optional(),
  value: Str.optional(),
});
export type Identifier = z.infer<typeof Identifier>;

export const Reference = z.looseObject({
  reference: Str.optional(),
  type: Str.optional(),
  identifier: Identifier.optional(),
  display: Str.optional(),
});
export type Reference = z.infer<typeof Reference>;

export const Period = z.looseObject({ start: Str.optional(), end: Str.optional() });
export type Period = z.infer<typeof Period>;

export const HumanName = z.looseObject({
  use: Str.optional(),
  family: Str.optional(),
  given: z.array(Str).optional(),
  text: Str.optional(),
  period: Period.optional(),
});
export type HumanName = z.infer<typeof HumanName>;

const resource = <T extends string>(type: T) =>
  z.looseObject({ resourceType: z.literal(type), id: Str.optional(), contained: z.array(z.looseObject({})).optional() });

export const Appointment = resource('Appointment').extend({
  status: Str.optional(),
  start: Str.optional(),
  participant: z.array(z.looseObject({ actor: Reference.optional(), status: Str.optional() })).optional(),
});
export type Appointment = z.infer<typeof Appointment>;

const Person = {
  identifier: z.array(Identifier).optional(),
  name: z.array(HumanName).optional(),
  gender: Str.optional(),
  birthDate: Str.optional(),
};
export const Patient = resource('Patient').extend({
  ...Person,
  link: z.array(z.looseObject({ other: Reference.optional(), type: Str.optional() })).optional(),
});
export type Patient = z.infer<typeof Patient>;
export const RelatedPerson = resource('RelatedPerson').extend(Person);
export type RelatedPerson = z.infer<typeof RelatedPerson>;

export const Coverage = resource('Coverage').extend({
  status: Str.optional(),
  type: CodeableConcept.optional(),
  identifier: z.array(Identifier).optional(),
  subscriber: Reference.optional(),
  subscriberId: Str.optional(),
  beneficiary: Reference.optional(),
  relationship: CodeableConcept.optional(),
  payor: z.array(Reference).optional(),
  class: z.array(z.looseObject({ type: CodeableConcept.optional(), value: Str.optional(), name: Str.optional() })).optional(),
  order: z.number().optional(),
  period: Period.optional(),
});
export type Coverage = z.infer<typeof Coverage>;

export const Organization = resource('Organization').extend({
  identifier: z.array(Identifier).optional(),
  name: Str.optional(),
});
export type Organization = z.infer<typeof Organization>;

export const Practitioner = resource('Practitioner').extend({
  identifier: z.array(Identifier).optional(),
  name: z.array(HumanName).optional(),
});
export type Practitioner = z.infer<typeof Practitioner>;

export const Location = resource('Location').extend({ identifier: z.array(Identifier).optional() });
export type Location = z.infer<typeof Location>;

/** Parses one resource, or records each mismatch as an issue at its FHIRPath and returns undefined. */
export function parseResource<T extends z.ZodType>(schema: T, value: unknown, path: string, issues: FhirIssue[]): z.infer<T> | undefined {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  for (const issue of parsed.error.issues) issues.push({ expression: pathOf(path, issue.path), diagnostics: issue.message, code: 'structure' });
  return undefined;
}

/** A zod issue path as FHIRPath below `base`: ['name', 0, 'given'] -> base.name[0].given. */
export function pathOf(base: string, path: readonly PropertyKey[]): string {
  return base + path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
}
