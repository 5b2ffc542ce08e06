import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';

/**
 * What no log line may hold: the fixtures' patient and subscriber names, birth dates and member
 * ids, and the secrets the tests use. Read from fixtures/ (HL7 expected outputs, FHIR bundles,
 * request bodies), so a new fixture is covered without a change here.
 */
export interface Term {
  kind: 'name' | 'birth date' | 'member id' | 'secret';
  pattern: RegExp;
  /** The term itself, for the failure message of a test run (never a log). */
  text: string;
}

const FIELDS: Record<string, Term['kind']> = {
  firstName: 'name',
  lastName: 'name',
  family: 'name',
  given: 'name',
  birthDate: 'birth date',
  dateOfBirth: 'birth date',
  memberId: 'member id',
  subscriberId: 'member id',
};
/** People who are not patients: their names are not patient data. */
const NOT_PATIENTS = new Set(['provider', 'verificationProvider', 'Practitioner', 'Organization', 'PractitionerRole']);

/** The secrets tests set: the sandbox's default key, portal passwords; generated ones by their form. */
const SECRETS: RegExp[] = [
  /sk_sandbox_0{16}/,
  /whsec_[A-Za-z0-9+/=]{16,}/,
  /\bportal-pass-1\b/,
  /\bs3cret!/,
  /\bsandbox-password\b/,
  /\bwrong-password\b/,
  /\bexpired-2019\b/,
];

const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export function forbiddenTerms(root: string): Term[] {
  const found = new Map<string, Term['kind']>();
  const walk = (value: unknown, key: string | undefined) => {
    if (Array.isArray(value)) return value.forEach((item) => walk(item, key));
    if (typeof value === 'string' && key !== undefined && FIELDS[key]) found.set(value.trim(), FIELDS[key]);
    if (value === null || typeof value !== 'object') return;
    const object = value as Record<string, unknown>;
    if (typeof object.resourceType === 'string' && NOT_PATIENTS.has(object.resourceType)) return;
    for (const [k, v] of Object.entries(object)) if (!NOT_PATIENTS.has(k)) walk(v, k);
  };
  for (const folder of ['hl7', 'fhir', 'requests']) {
    const dir = path.join(root, 'fixtures', folder);
    for (const name of readdirSync(dir).filter((n) => n.endsWith('.json'))) walk(JSON.parse(readFileSync(path.join(dir, name), 'utf8')), undefined);
  }
  const terms: Term[] = [];
  for (const [text, kind] of found) {
    // One- and two-letter names (initials) would match anything.
    if (text.length < 3) continue;
    terms.push({ kind, text, pattern: new RegExp(`\\b${escape(text)}\\b`, kind === 'name' ? 'i' : '') });
    // An HL7 date, as a raw message would carry it.
    if (kind === 'birth date' && /^\d{4}-\d{2}-\d{2}$/.test(text)) terms.push({ kind, text, pattern: new RegExp(`\\b${text.replaceAll('-', '')}\\b`) });
  }
  return [...terms, ...SECRETS.map((pattern) => ({ kind: 'secret' as const, pattern, text: pattern.source }))];
}

/** Whether a captured line is a log line: pino's JSON, a CLI's `dental-elig:` line, or anything a process wrote to a log stream. */
export function isLogLine(source: string, line: string): boolean {
  if (source === 'pino' || source === 'child-stderr' || source === 'cli-stderr') return true;
  return line.startsWith('dental-elig:') || (line.startsWith('{') && line.includes('"level":'));
}
