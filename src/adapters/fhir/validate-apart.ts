import type { CoverageEligibilityResponse, Resource } from 'fhir/r4';
import type { FhirIssue } from './operation-outcome';

/*
 * Most of a CoverageEligibilityResponse is its benefit items, its extensions (plan, plan
 * assignment, disclaimers) and its contained office and providers: 27 of the 28 KB of a full
 * result. They cost most of validation, as Medplum's validator spends about half a microsecond a
 * byte, most on choice types such as an extension's value[x]. And they repeat: patients on one
 * plan get the same ones. Neither validator relates such a part to anything outside it (R4 has
 * no invariant from elsewhere into insurance.item or an extension, and the two that relate parts,
 * ref-1 and dom-3, neither validator checks: a test pins that). So a response is validated
 * without the parts seen before, and each of those has the issues found when it was first
 * validated in place. In a morning's batch most parts repeat and a few are the patient's own (the
 * payer-patient and payer-subscriber extensions): those few are validated, in the response,
 * among the rest of it. Parts are known by their JSON text: what the chart is sent.
 */

/** Issues from each validator, kept apart so validateR4 lists Medplum's before the schema's, as a whole validation does. */
export interface ValidatorIssues {
  medplum: FhirIssue[];
  schema: FhirIssue[];
}

/** The arrays whose elements are parts, each named as the response names it. */
type Kind = 'item' | 'extension' | 'contained';

interface Part {
  kind: Kind;
  value: object;
  /** The insurance entry whose array holds the part; undefined when the response's own array does. */
  entry: number | undefined;
  /** The path of the array holding the part. */
  array: string;
  /** Where the part sits in the response. */
  path: string;
}

const CACHE_SIZE = 4096;
/** Medplum's issues in a part, by its kind and JSON text together, each expression relative to the part. */
const cache = new Map<string, FhirIssue[]>();

/** Forgets every part validated, so the next validation of each is a first one (what the fhir-mapping bench measures). */
export function forgetValidatedParts(): void {
  cache.clear();
}

/**
 * A response's issues: the response validated without the parts seen before, their issues as
 * they were found, and the parts not seen before learnt. A part kept has its place in what is
 * validated shifted by the parts removed before it, so its issues are named back where it sits.
 */
export function validateApart(resource: Resource, validate: (resource: Resource) => ValidatorIssues): ValidatorIssues {
  const parts = partsOf(resource);
  if (!parts) return validate(resource);
  // One flat text per part, its kind within it: a kind prefixed to the part's text would be a second text the size of the first.
  const keys = parts.map((part) => JSON.stringify([part.kind, part.value]));
  const known = keys.map((key) => cache.get(key));
  let seen = false;
  // The least recently used goes first when the cache is full.
  keys.forEach((key, i) => {
    const issues = known[i];
    if (issues) (seen = true), cache.delete(key), cache.set(key, issues);
  });
  const { shell, at } = seen ? keeping(resource, parts, known) : { shell: resource, at: parts.map((part) => part.path) };
  const found = validate(shell);
  // Medplum stops at an element it cannot validate (a contained resource of no known type) and
  // reports that alone, at the resource, so the issues of the parts seen before must not join it.
  // An issue at the resource is rare: the whole response is validated then.
  if (shell !== resource && found.medplum.some((issue) => issue.expression === resource.resourceType)) return validate(resource);
  const kept = parts.flatMap((part, i) => (known[i] ? [] : [{ key: keys[i] as string, at: at[i] as string, path: part.path }]));
  learn(kept, found);
  const back = (issue: FhirIssue): FhirIssue => {
    const part = kept.find((k) => within(issue.expression, k.at));
    return part && part.at !== part.path ? { ...issue, expression: part.path + issue.expression.slice(part.at.length) } : issue;
  };
  const medplum = found.medplum.map(back);
  parts.forEach((part, i) => {
    for (const issue of known[i] ?? []) medplum.push({ ...issue, expression: part.path + issue.expression });
  });
  return { medplum, schema: found.schema.map(back) };
}

/**
 * Keeps each part's Medplum issues, from a validation where nothing else could have been caused
 * by a part: the schema validator names only the first error it meets, so it must find none, and
 * every Medplum issue must lie inside a part or away from every part, never at an element holding
 * one (the resource, an insurance entry, a part's array), where a rule may read the part. Medplum
 * names some elements without their indices, so "away" is judged without them too. A warning on
 * the patient reference (a urn:uuid in a transaction) tells nothing of the parts.
 * `at` is where the part sat in what was validated.
 */
function learn(parts: Array<{ key: string; at: string }>, found: ValidatorIssues): void {
  if (parts.length === 0 || found.schema.length > 0) return;
  const own = parts.map((part) => found.medplum.filter((issue) => within(issue.expression, part.at)));
  const elsewhere = found.medplum.filter((issue) => !parts.some((part) => within(issue.expression, part.at)));
  if (elsewhere.some((issue) => parts.some((part) => related(issue.expression, part.at)))) return;
  parts.forEach((part, i) => {
    if (cache.size >= CACHE_SIZE) cache.delete(cache.keys().next().value as string);
    cache.set(part.key, (own[i] as FhirIssue[]).map((issue) => ({ ...issue, expression: issue.expression.slice(part.at.length) })));
  });
}

/** Whether one of two elements holds the other, read without indices. */
function related(a: string, b: string): boolean {
  const bare = (path: string) => path.replace(/\[\d+\]/g, '');
  return within(bare(a), bare(b)) || within(bare(b), bare(a));
}

/** Whether an expression names the element at a path or something inside it. */
function within(expression: string, path: string): boolean {
  return expression.startsWith(path) && /^($|[.[])/.test(expression.slice(path.length));
}

/**
 * The response with only the parts not known in their arrays, in their order, and where each
 * sits in it. Everything else stays as it was, its properties in their order; an array left with
 * no part goes, as it would when every part was known.
 */
function keeping(resource: Resource, parts: Part[], known: Array<FhirIssue[] | undefined>): { shell: Resource; at: Array<string | undefined> } {
  const shell: Record<string, unknown> = { ...resource };
  const entries = Array.isArray(shell.insurance) ? (shell.insurance as object[]).map((entry) => ({ ...entry }) as Record<string, unknown>) : [];
  if (entries.length > 0) shell.insurance = entries;
  const owner = (part: Part) => (part.entry === undefined ? shell : (entries[part.entry] as Record<string, unknown>));
  for (const part of parts) owner(part)[part.kind] = [];
  const at = parts.map((part, i) => {
    if (known[i]) return undefined;
    const array = owner(part)[part.kind] as object[];
    return `${part.array}[${array.push(part.value) - 1}]`;
  });
  for (const part of parts) if ((owner(part)[part.kind] as object[] | undefined)?.length === 0) delete owner(part)[part.kind];
  return { shell: shell as unknown as Resource, at };
}

/** A response's parts; undefined when it has none, or any of a shape that validates differently once removed. */
function partsOf(resource: Resource): Part[] | undefined {
  if (resource.resourceType !== 'CoverageEligibilityResponse') return undefined;
  const { contained, extension, insurance } = resource as CoverageEligibilityResponse;
  const parts: Part[] = [];
  if (!take(contained, 'contained', undefined, parts) || !take(extension, 'extension', undefined, parts)) return undefined;
  if (insurance !== undefined) {
    if (!Array.isArray(insurance)) return undefined;
    for (const [i, entry] of (insurance as unknown[]).entries()) {
      if (!isObject(entry)) return undefined;
      const { item, extension: own, ...kept } = entry;
      // An entry left with nothing would be reported as empty, which the whole one is not.
      if (!take(item, 'item', i, parts) || !take(own, 'extension', i, parts) || Object.keys(kept).length === 0) return undefined;
    }
  }
  return parts.length > 0 ? parts : undefined;
}

/** Adds an array's elements as parts; false when the array is of a shape that validates differently once removed. */
function take(value: unknown, kind: Kind, entry: number | undefined, parts: Part[]): boolean {
  if (value === undefined) return true;
  if (!Array.isArray(value) || value.length === 0 || !value.every(isObject)) return false;
  const array = entry === undefined ? `CoverageEligibilityResponse.${kind}` : `CoverageEligibilityResponse.insurance[${entry}].${kind}`;
  value.forEach((element, i) => parts.push({ kind, value: element, entry, array, path: `${array}[${i}]` }));
  return true;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
