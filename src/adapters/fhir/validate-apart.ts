import type { CoverageEligibilityResponse, Resource } from 'fhir/r4';
import type { FhirIssue } from './operation-outcome';

/*
 * Most of a CoverageEligibilityResponse is its benefit items, its extensions (plan, plan
 * assignment, disclaimers) and its contained office and providers: 27 of the 28 KB of a full
 * result. They cost most of validation, as Medplum's validator spends about half a microsecond a
 * byte, most on choice types such as an extension's value[x]. And they repeat: patients on one
 * plan get the same ones. Neither validator relates such a part to anything outside it (R4 has
 * no invariant from elsewhere into insurance.item or an extension, and the two that relate parts,
 * ref-1 and dom-3, neither validator checks: a test pins that). So a response whose parts were
 * all seen before is validated without them, and each part's issues are the ones found when it
 * was first validated in place, in a whole response. Parts are known by their JSON text: what
 * the chart is sent.
 */

/** Issues from each validator, kept apart so validateR4 lists them in the order a whole validation does. */
export interface ValidatorIssues {
  medplum: FhirIssue[];
  schema: FhirIssue[];
}

type Kind = 'item' | 'extension' | 'contained';

interface Part {
  kind: Kind;
  value: object;
  /** Where the part sits in the response validated. */
  path: string;
}

const CACHE_SIZE = 4096;
/** Medplum's issues in a part, by kind and JSON text, each expression relative to the part. */
const cache = new Map<string, FhirIssue[]>();

/** Forgets every part validated, so the next validation of each is a first one (what the fhir-mapping bench measures). */
export function forgetValidatedParts(): void {
  cache.clear();
}

/**
 * A response's issues: the rest of it validated, and its parts' issues as they were found, when
 * every part was seen before; otherwise the whole response validated, and its parts learnt.
 */
export function validateApart(resource: Resource, validate: (resource: Resource) => ValidatorIssues): ValidatorIssues {
  const split = splitResponse(resource);
  if (!split) return validate(resource);
  const keys = split.parts.map((part) => `${part.kind}\n${JSON.stringify(part.value)}`);
  const known = keys.map((key) => cache.get(key));
  if (known.every((issues) => issues !== undefined)) {
    // The least recently used goes first when the cache is full.
    keys.forEach((key, i) => (cache.delete(key), cache.set(key, known[i] as FhirIssue[])));
    const shell = validate(split.shell);
    const parts = split.parts.flatMap((part, i) => (known[i] as FhirIssue[]).map((issue) => ({ ...issue, expression: part.path + issue.expression })));
    return { medplum: [...shell.medplum, ...parts], schema: shell.schema };
  }
  const whole = validate(resource);
  learn(split.parts, keys, whole);
  return whole;
}

/**
 * Keeps each part's Medplum issues, from a response where nothing else could have been caused by
 * a part: the schema validator names only the first error it meets, so it must find none, and
 * every Medplum issue must lie inside a part.
 */
function learn(parts: Part[], keys: string[], whole: ValidatorIssues): void {
  if (whole.schema.length > 0) return;
  const own = parts.map((part) => whole.medplum.filter((issue) => issue.expression.startsWith(part.path) && /^($|[.[])/.test(issue.expression.slice(part.path.length))));
  if (own.reduce((n, issues) => n + issues.length, 0) !== whole.medplum.length) return;
  parts.forEach((part, i) => {
    if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value as string);
    cache.set(keys[i] as string, (own[i] as FhirIssue[]).map((issue) => ({ ...issue, expression: issue.expression.slice(part.path.length) })));
  });
}

function splitResponse(resource: Resource): { shell: Resource; parts: Part[] } | undefined {
  if (resource.resourceType !== 'CoverageEligibilityResponse') return undefined;
  const { contained, extension, insurance, ...rest } = resource as CoverageEligibilityResponse;
  const parts: Part[] = [];
  if (!take(contained, 'contained', 'CoverageEligibilityResponse.contained', parts)) return undefined;
  if (!take(extension, 'extension', 'CoverageEligibilityResponse.extension', parts)) return undefined;
  let entries: unknown[] | undefined;
  if (insurance !== undefined) {
    if (!Array.isArray(insurance)) return undefined;
    entries = [];
    for (const [i, entry] of (insurance as unknown[]).entries()) {
      if (!isObject(entry)) return undefined;
      const { item, extension: own, ...kept } = entry;
      const at = `CoverageEligibilityResponse.insurance[${i}]`;
      // An entry left with nothing would be reported as empty, which the whole one is not.
      if (!take(item, 'item', `${at}.item`, parts) || !take(own, 'extension', `${at}.extension`, parts) || Object.keys(kept).length === 0) return undefined;
      entries.push(kept);
    }
  }
  if (parts.length === 0) return undefined;
  return { shell: { ...rest, ...(entries ? { insurance: entries } : {}) } as Resource, parts };
}

/** Adds an array's elements as parts; false when the array is of a shape that validates differently once removed. */
function take(value: unknown, kind: Kind, path: string, parts: Part[]): boolean {
  if (value === undefined) return true;
  if (!Array.isArray(value) || value.length === 0 || !value.every(isObject)) return false;
  value.forEach((element, i) => parts.push({ kind, value: element, path: `${path}[${i}]` }));
  return true;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
