import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { CoverageEligibilityResponse, OperationOutcome } from 'fhir/r4';
import { loadClinicRouting } from '../../../src/adapters/clinic-routing';
import { convertBundle } from '../../../src/adapters/fhir/in';
import { FhirInputError, operationOutcome } from '../../../src/adapters/fhir/operation-outcome';
import { toCoverageEligibilityResponse, type ResponseRefs } from '../../../src/adapters/fhir/out';
import type { EligibilityCheck, PayerResolution, PayerResolver } from '../../../src/domain';
import { projectRoot } from '../../../src/mapping-files';
import { toOutcome } from '../../../src/verification/outcome';

/** fixtures/fhir: <name>.bundle.json and <name>.expected.json (see convertFixture). */
export const BUNDLE_DIR = path.join(projectRoot, 'fixtures', 'fhir');
/** fixtures/results: <name>.json (a verification body) and <name>.expected.json (the CoverageEligibilityResponse). */
export const RESULT_DIR = path.join(projectRoot, 'fixtures', 'results');

export const RECEIVED_AT = '2026-11-20T15:00:00Z';
export const CREATED = '2026-11-22T12:00:00Z';
/** What the pipeline knows when it writes a result: the chart's patient and coverage, and the payer as the check named it. */
export const RESULT_REFS: ResponseRefs = {
  patient: 'Patient/pat-ellen',
  coverage: 'Coverage/cov-ellen-delta',
  payer: { name: 'Delta Dental of California', id: 'CDCA1' },
};

export const readJson = (file: string): unknown => JSON.parse(readFileSync(file, 'utf8'));

export const bundleNames = () =>
  readdirSync(BUNDLE_DIR)
    .filter((f) => f.endsWith('.bundle.json'))
    .map((f) => f.slice(0, -'.bundle.json'.length))
    .sort();

export const resultNames = () =>
  readdirSync(RESULT_DIR)
    .filter((f) => f.endsWith('.json') && !f.endsWith('.expected.json'))
    .map((f) => f.slice(0, -'.json'.length))
    .sort();

export const readBundle = (name: string) => readJson(path.join(BUNDLE_DIR, `${name}.bundle.json`));
export const readResult = (name: string) => readJson(path.join(RESULT_DIR, `${name}.json`));

/** The checks and, as an OperationOutcome, the notes of a conversion that has any. */
export interface NotedChecks {
  checks: EligibilityCheck[];
  notes: OperationOutcome;
}

/**
 * What a fixture's expected file holds: the checks `convert fhir` prints; `{ checks, notes }` when
 * the conversion also has notes (warnings, information); or the OperationOutcome of a bundle that
 * cannot make checks.
 */
export function convertFixture(name: string, resolver?: PayerResolver): EligibilityCheck[] | NotedChecks | OperationOutcome {
  try {
    const { checks, notes } = convertBundle(readBundle(name), { routing: loadClinicRouting(), receivedAt: RECEIVED_AT, resolver });
    return notes.length === 0 ? checks : { checks, notes: operationOutcome(notes) };
  } catch (err) {
    if (err instanceof FhirInputError) return err.outcome;
    throw err;
  }
}

/** The checks of a fixture's output, whichever form it has. */
export function checksOf(out: ReturnType<typeof convertFixture>): EligibilityCheck[] {
  return Array.isArray(out) ? out : 'checks' in out ? out.checks : [];
}

export function convertResult(name: string): CoverageEligibilityResponse {
  return toCoverageEligibilityResponse(toOutcome(readResult(name)), RESULT_REFS, { created: CREATED });
}

/** A resolver that knows two payers by name and one common id twice over, enough to see each status. */
export const testPayers: PayerResolver = {
  resolve({ name, id }): PayerResolution {
    if (id === '62308') {
      return {
        status: 'ambiguous',
        matchedBy: 'commonPayerId',
        candidates: [
          { primaryPayerId: 'CIGN01', commonPayerId: '62308', name: 'Cigna Dental' },
          { primaryPayerId: 'CIGN02', commonPayerId: '62308', name: 'Cigna Dental Care DHMO' },
        ],
      };
    }
    if (name === 'Delta Dental of California') {
      return { status: 'resolved', matchedBy: 'name', primaryPayerId: 'DDCA01', commonPayerId: 'CDCA1', name, syncPortals: ['deltadentalins'], asyncPortals: ['deltadentalins'], supportsAsync: true };
    }
    return { status: 'unknown' };
  },
};

/** Every string and number in a JSON value, with its path. */
export function leaves(value: unknown, at = ''): Array<{ path: string; value: string | number | boolean }> {
  if (value === null || value === undefined) return [];
  if (Array.isArray(value)) return value.flatMap((v, i) => leaves(v, `${at}[${i}]`));
  if (typeof value === 'object') return Object.entries(value).flatMap(([k, v]) => leaves(v, at ? `${at}.${k}` : k));
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return [{ path: at, value }];
  return [];
}
