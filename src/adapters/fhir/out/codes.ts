/**
 * Codes for the response, all read from mappings/fhir (categories.json, benefit-codes.json,
 * error-codes.json). A CodeableConcept keeps the service's own word as its text, so a value the
 * tables do not know still reaches the chart, only without a coding.
 */
import type { CodeableConcept, Coding } from 'fhir/r4';
import * as z from 'zod';
import { readMappingFile } from '../../../mapping-files';
import { SystemKeySchema, systemUrl } from '../systems';
import { present } from './values';

const Text = z.string().min(1);
const CdtRange = z.string().regex(/^D\d{4}(-D\d{4})?$/, { error: 'must be a CDT code or range, e.g. D0100-D0999' });

const CategoriesFile = z
  .looseObject({
    serviceTypes: z.record(z.string().regex(/^[0-9A-Z]{1,2}$/), z.strictObject({ display: Text, exBenefitCategory: z.boolean() })),
    general: Text,
    /** serviceType null: a part of dental care X12 has no service type for (implants), named by its text alone, never coded as dental care as a whole. */
    categories: z.record(Text, z.strictObject({ serviceType: Text.nullable(), cdt: z.array(CdtRange) })),
  })
  .superRefine((file, ctx) => {
    const known = (code: string) => code in file.serviceTypes;
    if (!known(file.general)) ctx.addIssue({ code: 'custom', path: ['general'], message: 'is not a key of serviceTypes' });
    for (const [name, c] of Object.entries(file.categories)) {
      if (c.serviceType !== null && !known(c.serviceType)) ctx.addIssue({ code: 'custom', path: ['categories', name, 'serviceType'], message: 'is not a key of serviceTypes' });
    }
  });

const MappedCoding = z.strictObject({ system: SystemKeySchema, code: Text, display: Text });
export const BENEFIT_TYPES = ['maximum', 'deductible', 'coinsurance', 'frequency', 'minimumAge', 'maximumAge', 'waitingPeriod'] as const;
export type BenefitTypeKey = (typeof BENEFIT_TYPES)[number];

const BenefitCodesFile = z.looseObject({
  network: z.record(Text, MappedCoding),
  participation: z.record(Text, MappedCoding),
  unit: z.record(Text, MappedCoding),
  term: z.record(Text, MappedCoding),
  periodUnits: z.record(Text, z.strictObject({ code: Text, unit: Text })),
  planStatus: z.record(Text, z.boolean()),
  /** Absent in a copy of the mappings from before it: no words then mark a category not covered. */
  notCovered: z.array(Text).optional(),
  benefitType: z.record(z.enum(BENEFIT_TYPES), MappedCoding.extend({ text: Text })),
});

export const ISSUE_KINDS = ['context', 'upstream', 'field'] as const;
export type IssueKind = (typeof ISSUE_KINDS)[number];
export const FAILURE_ACTIONS = ['retry-later', 'needs-a-person', 'unknown'] as const;
export type FailureActionCode = (typeof FAILURE_ACTIONS)[number];

const ErrorCodesFile = z.looseObject({
  failureKinds: z.record(Text, z.strictObject({ display: Text, x12: z.strictObject({ code: Text, display: Text }).optional(), inforce: z.literal(false).optional() })),
  issues: z.record(z.enum(ISSUE_KINDS), z.strictObject({ code: Text, display: Text })),
  actions: z.record(z.enum(FAILURE_ACTIONS), z.strictObject({ display: Text })),
});

let categoriesFile: z.infer<typeof CategoriesFile> | undefined;
let benefitCodesFile: z.infer<typeof BenefitCodesFile> | undefined;
let errorCodesFile: z.infer<typeof ErrorCodesFile> | undefined;
export const categoryTable = () => (categoriesFile ??= readMappingFile('fhir/categories.json', CategoriesFile));
export const benefitCodes = () => (benefitCodesFile ??= readMappingFile('fhir/benefit-codes.json', BenefitCodesFile));
export const errorCodes = () => (errorCodesFile ??= readMappingFile('fhir/error-codes.json', ErrorCodesFile));

/** The service's enumerations arrive as InNetwork, in-network or IN_NETWORK alike. */
const normalise = (value: string) => value.replace(/[\s_-]/g, '').toLowerCase();
/** Each table by its keys normalised, the first key of each normal form winning; made once per table, since the tables are read once. */
const normalised = new WeakMap<object, Map<string, unknown>>();
function lookup<T>(table: Record<string, T>, value: string): T | undefined {
  let byNormal = normalised.get(table) as Map<string, T> | undefined;
  if (byNormal === undefined) {
    byNormal = new Map();
    for (const [key, entry] of Object.entries(table)) if (!byNormal.has(normalise(key))) byNormal.set(normalise(key), entry);
    normalised.set(table, byNormal);
  }
  return byNormal.get(normalise(value));
}

const coding = (m: z.infer<typeof MappedCoding>): Coding => ({ system: systemUrl(m.system), code: m.code, display: m.display });

/** X12 service type coding, plus the ex-benefitcategory coding where FHIR's code system has the code. */
export function serviceTypeConcept(serviceType: string, text?: string): CodeableConcept {
  const entry = categoryTable().serviceTypes[serviceType];
  const codings: Coding[] = [{ system: systemUrl('x12ServiceType'), code: serviceType, ...(entry ? { display: entry.display } : {}) }];
  if (entry?.exBenefitCategory) codings.push({ system: systemUrl('exBenefitCategory'), code: serviceType, display: entry.display });
  return { coding: codings, ...(text ? { text } : {}) };
}

/** A benefit category by the service's name; absent (or blank) means general dental care, unknown or without a service type keeps the name alone. */
export function categoryConcept(given: string | null | undefined): CodeableConcept {
  const name = present(given);
  if (!name) return serviceTypeConcept(categoryTable().general);
  const serviceType = lookup(categoryTable().categories, name)?.serviceType;
  return serviceType ? serviceTypeConcept(serviceType, name) : { text: name };
}

/** The service type of the first category whose CDT ranges hold every code. */
export function serviceTypeForCodes(codes: string[]): string | undefined {
  const inRange = (code: string, range: string) => {
    const [low, high = low] = range.split('-') as [string, string?];
    return code >= low && code <= high;
  };
  const found = Object.values(categoryTable().categories).find(
    (c) => c.cdt.length > 0 && codes.every((code) => c.cdt.some((range) => inRange(code, range))),
  );
  return found?.serviceType ?? undefined;
}

export const isCdtCode = (code: string) => /^D\d{4}$/.test(code);

/** A CDT procedure code; anything else is kept as text, since it cannot claim the CDT system. */
export function procedureConcept(code: string): CodeableConcept {
  return isCdtCode(code) ? { coding: [{ system: systemUrl('cdt'), code }] } : { text: code };
}

export type CodeTable = 'network' | 'participation' | 'unit' | 'term';

export function mappedConcept(table: CodeTable, value: string | null | undefined): CodeableConcept | undefined {
  if (!value) return undefined;
  const mapped = lookup(benefitCodes()[table], value);
  return mapped ? { coding: [coding(mapped)], text: value } : { text: value };
}

export function benefitTypeConcept(key: BenefitTypeKey): CodeableConcept {
  const entry = benefitCodes().benefitType[key];
  return { coding: [coding(entry)], text: entry.text };
}

export function periodUnit(period: string | null | undefined): { code: string; unit: string } | undefined {
  return period ? lookup(benefitCodes().periodUnits, period) : undefined;
}

export function planInforce(status: string | null | undefined): boolean | undefined {
  return status ? lookup(benefitCodes().planStatus, status) : undefined;
}

let notCovered: Set<string> | undefined;
/** true when a coinsurance percentage given as words says the plan does not cover it ("Not covered"); else nothing is known of it. */
export function notCoveredText(text: string): true | undefined {
  notCovered ??= new Set((benefitCodes().notCovered ?? []).map(normalise));
  return notCovered.has(normalise(text)) || undefined;
}

/** A failure kind: X12 AAA03 reject reason where one fits, always the kind itself in the local system. */
export function failureKindConcept(kind: string, text: string | undefined): CodeableConcept {
  const entry = errorCodes().failureKinds[kind];
  const codings: Coding[] = [];
  if (entry?.x12) codings.push({ system: systemUrl('x12RejectReason'), code: entry.x12.code, display: entry.x12.display });
  codings.push({ system: systemUrl('failureKind'), code: kind, ...(entry ? { display: entry.display } : {}) });
  return { coding: codings, ...(text ? { text } : {}) };
}

/** false when a failure of this kind is the payer saying the coverage is not in force; else nothing is known of it. */
export function failureInforce(kind: string): false | undefined {
  return errorCodes().failureKinds[kind]?.inforce;
}

export function issueConcept(kind: IssueKind, text: string): CodeableConcept {
  const entry = errorCodes().issues[kind];
  return { coding: [{ system: systemUrl('verificationIssue'), code: entry.code, display: entry.display }], text };
}

export function failureActionCoding(action: FailureActionCode): Coding {
  return { system: systemUrl('failureAction'), code: action, display: errorCodes().actions[action].display };
}
