import { randomUUID } from 'node:crypto';
import type { BundleEntry, Coverage, CoverageEligibilityRequest, CoverageEligibilityResponse, Organization, Patient, Resource } from 'fhir/r4';
import * as z from 'zod';
import { datesDeleted, type EligibilityCheck } from '../domain';
import { describeIssue } from '../domain/issues';
import { toCoverageEligibilityRequest, toCoverageEligibilityResponse } from '../adapters/fhir/out';
import { insurerReference } from '../adapters/fhir/out/references';
import { systemUrl } from '../adapters/fhir/systems';
import { assertValidR4, r4Errors } from '../adapters/fhir/validate';
import type { VerificationOutcome } from '../verification/outcome';
import { timerMs } from '../timer-ms';
import { CHART_TRAFFIC, isPlainHttpAcrossNetwork, plainHttpRefused } from '../url-checks';
import { CHART_TIMEOUT_MS, chartClient, idFrom, type ChartClient } from './chart-client';
import { ChartWriteError, toChartWriteError } from './chart-errors';
import { appointmentReference, chartParts, closedCoverage, coverageResource, endedCoverage, forBeneficiary, sharedPatient, identifierCondition, insurerResource, patientResource, payerOf, rekeyed, updatedCoverage, updatedPatient, type ChartPart, type Rekey } from './chart-resources';
import { SmartBackendAuth, smartBackendTokens, staticToken } from './fhir-auth';
import { sameContent } from './same-content';

/** The chart resources a check's results belong to; a FHIR-sourced check names its own, an HL7 one has them found or created. */
export interface ChartRefs {
  patient?: string;
  coverage?: string;
  insurer?: string;
}

export interface WrittenEligibility {
  requestId: string;
  responseId: string;
  /** The Patient and Coverage the pair is written against (found, created, or the check's own). */
  patientId: string;
  coverageId: string;
  /** The insurer Organization, when the chart has one for this payer. */
  insurerId?: string | undefined;
  /** False when the chart already held exactly this: nothing was sent. */
  changed: boolean;
  request: CoverageEligibilityRequest;
  response: CoverageEligibilityResponse;
}

export interface WriteOptions {
  /**
   * The correlationId of the verification whose result the check reuses (CheckRow.reusedFrom):
   * the check still gets a pair of its own, whose response says where the result came from.
   */
  reusedFrom?: string | undefined;
  /**
   * The member ids (the subscriber's) an HL7 patient is insured under now, as the PMS last said;
   * undefined when not known. A write that creates a Coverage for a Patient the chart holds ends
   * the Coverages this plugin wrote for that patient under any other (endedCoverage): a corrected
   * member id or a new plan would otherwise leave the old one active beside it.
   */
  insuredUnder?: (() => Promise<readonly string[] | undefined>) | undefined;
  /**
   * When a new pair is dated (its `created`): the sync's clock, which an embedder or a test may
   * inject, so the chart's dates agree with the store's. Now when not given; a pair the chart
   * already holds keeps its own.
   */
  at?: string | undefined;
  /**
   * The pair of the check's earlier round the chart holds, which this write takes the place of
   * when the pair identifiers find none of its own: a round this plugin gave up again after it was
   * sent again (the service answering reads but failing verifications, an outage ending and
   * starting again), so the front desk keeps one response saying its benefits could not be
   * verified, brought up to date, not one more at each round. Taken only when it is the check's. Where the pair
   * identifiers find this very pair (the round sent again under the externalId of the one before), it is dated anew.
   */
  replaces?: { requestId: string; responseId: string } | undefined;
}

export interface EligibilityWriter {
  write(check: EligibilityCheck, outcome: VerificationOutcome, refs?: ChartRefs, options?: WriteOptions): Promise<WrittenEligibility>;
  /**
   * Ends the Coverage an HL7 check's write made, once its plan no longer serves the check's visit
   * (`droppedAt`, when the message saying so was received): cancelled when the PMS no longer sends
   * the plan, dated to the plan's dates the check carries when the plan ended before the visit
   * (closedCoverage). True when it changed one; false when there was none to change (not in the
   * chart, not active, or stated by a later message). A writer without it leaves such Coverages as
   * they are.
   */
  endCoverage?(check: EligibilityCheck, droppedAt: string): Promise<boolean>;
  /**
   * The pair a write of this check and verification made, where the chart holds it (found by its
   * identifiers, as `write` finds it), writing nothing: for a check withdrawn while a write of it
   * may have been under way. A writer without it is taken to hold none.
   */
  find?(check: EligibilityCheck, outcome: VerificationOutcome): Promise<{ requestId: string; responseId: string } | undefined>;
}

export const FhirWriterOptions = z
  .strictObject({
    /** A static access token. */
    bearerToken: z.string().min(1).optional(),
    /** SMART Backend Services: tokens fetched with a signed client assertion and kept until shortly before they expire. */
    smart: SmartBackendAuth.optional(),
    /** Each request to the FHIR server or token endpoint gives up after this long (a retryable failure). Default 30 s; a timer (AbortSignal.timeout) waits for it. */
    timeoutMs: timerMs(1).default(CHART_TIMEOUT_MS),
    /** Plain http:// to another machine sends the access token and patient data unencrypted: only when asked for (checked where the sync is created). */
    allowInsecureHttp: z.boolean().default(false),
  })
  .refine((o) => !(o.bearerToken && o.smart), { error: 'give bearerToken or smart, not both' });
export type FhirWriterOptions = z.input<typeof FhirWriterOptions>;

type Written = { kind: 'request' | 'response' | ChartPart['kind']; ref: string };

/** A write whose update the server refuses as based on an older version is read again and redone this often in all. */
const CONFLICT_ATTEMPTS = 3;
/** A version conflict: 412 for an If-Match on an older version, as R4 says; 409 from servers such as HAPI FHIR. */
const CONFLICT_STATUSES: ReadonlySet<number | undefined> = new Set([409, 412]);

/**
 * Writes a verification's CoverageEligibilityRequest and Response into the chart, one pair per
 * check and verification (the check's key and the correlation id: a fresh result reused for
 * another appointment is written as that appointment's own pair, never over the first's), through
 * the chart client (chartClient):
 *  - what the chart already holds is searched first (one batch): the pair by those identifiers and,
 *    for an HL7-sourced check, the insurer Organization, Patient and Coverage by identifier;
 *  - a later result for the same verification updates the pair in place (PUT with If-Match on
 *    the version read), the same result again sends nothing; an update another write overtook
 *    (412, or 409 from some servers) is read again and redone at once;
 *  - everything missing is created in the same transaction (conditional creates, urn:uuid
 *    references), so a failure leaves nothing, and a writer racing this one makes no duplicate;
 *  - every resource is validated against R4 before anything is sent.
 * Failures are ChartWriteErrors saying whether the same write may succeed later.
 */
export async function fhirWriter(baseUrl: string, options: FhirWriterOptions = {}): Promise<EligibilityWriter> {
  const parsed = FhirWriterOptions.safeParse(options);
  if (!parsed.success) throw new ChartWriteError(`options.${describeIssue(parsed.error)}`, { retryable: false });
  const { bearerToken, smart, timeoutMs, allowInsecureHttp } = parsed.data;
  // Refused here too, not only where the sync is created: an embedder may build the writer alone.
  if (isPlainHttpAcrossNetwork(baseUrl) && !allowInsecureHttp) {
    throw new ChartWriteError(`baseUrl: ${plainHttpRefused(CHART_TRAFFIC, 'allowInsecureHttp')}`, { retryable: false });
  }
  const base = baseUrl.replace(/\/+$/, '');
  const tokens = smart ? smartBackendTokens(base, smart, timeoutMs, allowInsecureHttp) : staticToken(bearerToken);
  const client = await chartClient(base, tokens, timeoutMs);

  async function write(check: EligibilityCheck, outcome: VerificationOutcome, refs: ChartRefs, options: WriteOptions): Promise<WrittenEligibility> {
    const source = check.source.kind === 'fhir' ? check.source : undefined;
    const given: Partial<Record<ChartPart['kind'], string>> = {
      patient: refs.patient ?? source?.patient,
      coverage: refs.coverage ?? source?.coverage,
      insurer: refs.insurer ?? source?.insurer,
    };
    const parts = check.source.kind === 'hl7' ? chartParts(check).filter((p) => !given[p.kind]) : [];
    const { correlationId } = outcome.verification;
    const pairCondition = pairConditionOf(check, outcome);
    // What this plugin wrote under a former identifier is searched in the same batch, and used only where the current one finds nothing.
    const formerly = parts.flatMap((p) => (p.rekey ? [`${p.resourceType}?${identifierCondition(p.rekey.from.system, p.rekey.from.value)}`] : []));
    const replaced = options.replaces;
    const answers = await client.findEach([
      ...parts.map((p) => `${p.resourceType}?${p.condition}`),
      `CoverageEligibilityRequest?${pairCondition}`,
      `CoverageEligibilityResponse?${pairCondition}`,
      ...formerly,
      ...(replaced ? [`CoverageEligibilityRequest?_id=${encodeURIComponent(replaced.requestId)}`, `CoverageEligibilityResponse?_id=${encodeURIComponent(replaced.responseId)}`] : []),
    ]);
    let next = parts.length + 2;
    const found = parts.map((p, i) => {
      const formerAnswer = p.rekey ? answers[next++] : undefined;
      return answers[i] ?? takenOver(formerAnswer, p.rekey);
    });
    const ofThisPair = [answers[parts.length], answers[parts.length + 1]] as [CoverageEligibilityRequest | undefined, CoverageEligibilityResponse | undefined];
    const ofTheRoundBefore = [answers[next], answers[next + 1]] as [CoverageEligibilityRequest | undefined, CoverageEligibilityResponse | undefined];
    // The earlier round's pair, when the chart holds none of this one's (or it is this one's: a round sent again under the
    // externalId of the round before, given up again): both of it, and the check's (its identifier), or neither.
    const isReplaced = (r: Resource | undefined, id: string | undefined) => r?.id !== undefined && r.id === id;
    const ofTheOneReplaced = isReplaced(ofThisPair[0], replaced?.requestId) && isReplaced(ofThisPair[1], replaced?.responseId);
    const replacing = ((!ofThisPair[0] && !ofThisPair[1]) || ofTheOneReplaced) && ofTheRoundBefore.every((r) => r?.identifier?.some((i) => i.system === systemUrl('eligibilityCheck') && i.value === check.idempotencyKey));
    const [storedRequest, storedResponse] = replacing ? ofTheRoundBefore : ofThisPair;
    // A new failure, dated as one: the pair it replaces was the round before's.
    const createdAt = (stored: { created?: string } | undefined) => (replacing ? options.at : (stored?.created ?? options.at));

    // Found: its reference; to be created: a urn:uuid the server rewrites to the new id.
    const urns = new Map<string, string>();
    const refFor = (kind: Written['kind'], type: string, stored: Resource | undefined) => {
      if (stored?.id) return `${type}/${stored.id}`;
      const urn = `urn:uuid:${randomUUID()}`;
      urns.set(urn, kind);
      return urn;
    };
    const chart = { ...given };
    parts.forEach((p, i) => (chart[p.kind] = refFor(p.kind, p.resourceType, found[i])));
    const patient = chart.patient;
    const coverage = chart.coverage;
    if (!patient || !coverage) {
      throw new ChartWriteError(`${patient ? 'Coverage' : 'Patient'}: the chart resource for this check is not known; pass it in refs`, { retryable: false });
    }
    const requestRef = refFor('request', 'CoverageEligibilityRequest', storedRequest);
    const responseRef = refFor('response', 'CoverageEligibilityResponse', storedResponse);

    const request = withAppointment(
      toCoverageEligibilityRequest(
        check,
        { patient, coverage, ...(chart.insurer ? { insurer: chart.insurer } : {}) },
        { correlationId, created: createdAt(storedRequest) },
      ),
      check,
    );
    // A result whose benefits the store's prune cut (a plan's latest check, its visit long over) is
    // written again for its Coverage alone (its order or dates changed): the response the chart holds keeps them.
    const kept = storedResponse && benefitsCut(outcome) ? storedResponse : undefined;
    const response = kept ?? toCoverageEligibilityResponse(
      outcome,
      { patient, coverage, request: requestRef, insurer: chart.insurer, payer: check.coverage.payer },
      { created: createdAt(storedResponse), checkKey: check.idempotencyKey, servicedDate: check.dateOfService, reusedFrom: options.reusedFrom },
    );
    const created = parts.filter((_, i) => !found[i]).map((p) => ({ part: p, resource: partResource(p, check, chart) }));
    const updates = [...updatesOfFound(parts, found, check, chart), ...(await endedBeside(parts, found, check, options.insuredUnder, client))];
    // Everything is built and validated before anything is sent: the chart gets all of it or nothing.
    for (const resource of [...created.map((c) => c.resource), request, response]) assertValidR4(resource);

    const resolved = new Map<string, string>();
    const changed = urns.size > 0 || updates.length > 0 || !sameContent(request, storedRequest) || !sameContent(response, storedResponse);
    if (changed) {
      const entries: BundleEntry[] = [
        ...created.map(({ part, resource }) => ({
          fullUrl: chart[part.kind],
          resource,
          request: { method: 'POST' as const, url: part.resourceType, ifNoneExist: part.condition },
        })),
        ...updates.map((u) => updateEntry(u.resource, u.id, u.version)),
        entryFor(request, requestRef, storedRequest, pairCondition),
        ...(kept ? [] : [entryFor(response, responseRef, storedResponse, pairCondition)]),
      ];
      const answer = await client.transaction(entries);
      entries.forEach((entry, i) => {
        const id = answer[i] && idFrom(answer[i]);
        if (!entry.fullUrl?.startsWith('urn:uuid:')) return;
        if (!id) throw new ChartWriteError('the FHIR server answered the transaction without the ids of what it created', { retryable: false });
        resolved.set(entry.fullUrl, `${entry.resource?.resourceType}/${id}`);
      });
    }
    const final = (ref: string) => resolved.get(ref) ?? ref;
    const idOf = (ref: string) => final(ref).split('/').pop() ?? ref;
    // The pair as the chart now holds it is built when first read: the worker needs only the ids.
    const stored = {
      request: once(() => ({ ...rewrite(request, final), id: idOf(requestRef) })),
      response: once(() => ({ ...rewrite(response, final), id: idOf(responseRef) })),
    };
    return {
      requestId: idOf(requestRef),
      responseId: idOf(responseRef),
      patientId: idOf(patient),
      coverageId: idOf(coverage),
      insurerId: chart.insurer ? idOf(chart.insurer) : undefined,
      changed,
      get request() {
        return stored.request();
      },
      get response() {
        return stored.response();
      },
    };
  }

  async function find(check: EligibilityCheck, outcome: VerificationOutcome): Promise<{ requestId: string; responseId: string } | undefined> {
    const pairCondition = pairConditionOf(check, outcome);
    const [request, response] = await client.findEach([`CoverageEligibilityRequest?${pairCondition}`, `CoverageEligibilityResponse?${pairCondition}`]);
    // Written in one transaction: both, or neither.
    return request?.id && response?.id ? { requestId: request.id, responseId: response.id } : undefined;
  }

  async function endCoverage(check: EligibilityCheck, droppedAt: string): Promise<boolean> {
    // A FHIR-sourced check's Coverage is the EHR's own.
    const part = check.source.kind === 'hl7' ? chartParts(check).find((p) => p.kind === 'coverage') : undefined;
    if (!part) return false;
    // Under the identifier this plugin gave it before (a Coverage no write has rekeyed since), where the current one finds none.
    const former = part.rekey ? [`Coverage?${identifierCondition(part.rekey.from.system, part.rekey.from.value)}`] : [];
    const [current, formerly] = await client.findEach([`Coverage?${part.condition}`, ...former]);
    const stored = current ?? formerly;
    const ended = stored?.id ? closedCoverage(stored as Coverage, check, droppedAt) : undefined;
    if (!stored?.id || !ended) return false;
    if (r4Errors(ended).length > 0) throw new ChartWriteError('Coverage: ending it would not be valid R4; left as it is', { retryable: false });
    await client.transaction([updateEntry(ended, stored.id, stored.meta?.versionId)]);
    return true;
  }

  /** Another write changed what this one read (two checks of one patient updating its Patient at once): read again and redo it now, rather than wait out a retry backoff. */
  async function redoneOnConflict<T>(step: string, attempt: () => Promise<T>): Promise<T> {
    for (let tries = 1; ; tries++) {
      try {
        return await attempt();
      } catch (err) {
        const failure = toChartWriteError(err, step);
        if (!CONFLICT_STATUSES.has(failure.status) || tries >= CONFLICT_ATTEMPTS) throw failure;
      }
    }
  }

  return {
    write: (check, outcome, refs = {}, options = {}) => redoneOnConflict('write', () => write(check, outcome, refs, options)),
    endCoverage: (check, droppedAt) => redoneOnConflict('write ending a Coverage', () => endCoverage(check, droppedAt)),
    find: (check, outcome) => find(check, outcome).catch((err: unknown) => Promise.reject(toChartWriteError(err, 'search for a written pair'))),
  };
}

/** What finds a check's pair for a verification: both identifiers, ANDed, as the verification's correlation id alone is shared by every check its result serves. */
function pairConditionOf(check: EligibilityCheck, outcome: VerificationOutcome): string {
  return `${identifierCondition(systemUrl('eligibilityCheck'), check.idempotencyKey)}&${identifierCondition(systemUrl('correlationId'), outcome.verification.correlationId)}`;
}

function partResource(part: ChartPart, check: EligibilityCheck, chart: Partial<Record<ChartPart['kind'], string>>): Organization | Patient | Coverage {
  switch (part.kind) {
    case 'insurer':
      return insurerResource(check);
    case 'patient':
      return patientResource(check);
    case 'coverage':
      return chartCoverage(check, chart);
  }
}

const chartCoverage = (check: EligibilityCheck, chart: Partial<Record<ChartPart['kind'], string>>) =>
  coverageResource(check, { patient: chart.patient ?? '', insurer: insurerReference(chart.insurer, payerOf(check)) });

/** The appointment the check was for, as the request's supporting information. */
function withAppointment(request: CoverageEligibilityRequest, check: EligibilityCheck): CoverageEligibilityRequest {
  const appointment = appointmentReference(check);
  return appointment ? { ...request, supportingInfo: [{ sequence: 1, information: appointment, appliesToAll: true }] } : request;
}

/** A completed or partial result stored without its benefits (`result.result`): what JobStore.prune leaves of a plan's latest check. */
function benefitsCut(outcome: VerificationOutcome): boolean {
  return (outcome.kind === 'completed' || outcome.kind === 'partial') && outcome.verification.result === undefined;
}

/** Created once per check and verification; once stored, updated in place. */
function entryFor<T extends CoverageEligibilityRequest | CoverageEligibilityResponse>(resource: T, ref: string, stored: T | undefined, condition: string): BundleEntry {
  if (!stored?.id) return { fullUrl: ref, resource, request: { method: 'POST', url: resource.resourceType, ifNoneExist: condition } };
  return updateEntry(resource, stored.id, stored.meta?.versionId);
}

/** An update on the version read (If-Match), so a concurrent update fails, and is tried again on what it made, rather than lost. */
function updateEntry<T extends CoverageEligibilityRequest | CoverageEligibilityResponse | Coverage | Patient>(resource: T, id: string, version: string | undefined): BundleEntry {
  return { resource: { ...resource, id }, request: { method: 'PUT', url: `${resource.resourceType}/${id}`, ...(version ? { ifMatch: `W/"${version}"` } : {}) } };
}

/**
 * The Patient and Coverage an HL7 check found in the chart, each brought up to what the check
 * says of it where that differs (updatedPatient, updatedCoverage). Not one whose update would not
 * be valid R4 (the EHR's own additions the validators refuse): the eligibility is still written,
 * against the resource as it stands.
 */
function updatesOfFound(
  parts: ChartPart[],
  found: Array<Resource | undefined>,
  check: EligibilityCheck,
  chart: Partial<Record<ChartPart['kind'], string>>,
): Array<{ resource: Patient | Coverage; id: string; version: string | undefined }> {
  return parts.flatMap((part, i) => {
    const stored = found[i];
    if (!stored?.id) return [];
    const resource =
      part.kind === 'patient' ? patientUpdate(stored as Patient, part.rekey, check)
      : part.kind === 'coverage' ? coverageUpdate(stored as Coverage, part.rekey, chartCoverage(check, chart), datesDeleted(check.coverage.period))
      : undefined;
    return resource && r4Errors(resource).length === 0 ? [{ resource, id: stored.id, version: stored.meta?.versionId }] : [];
  });
}

/**
 * The Coverages this plugin wrote for a Patient the chart holds that the patient is no longer
 * insured under, ended beside the Coverage this write creates or makes active again (a search of
 * the Patient's active Coverages, only then: a Coverage found active is the plan the patient still has).
 */
async function endedBeside(
  parts: ChartPart[],
  found: Array<Resource | undefined>,
  check: EligibilityCheck,
  insuredUnder: WriteOptions['insuredUnder'],
  client: ChartClient,
): Promise<Array<{ resource: Coverage; id: string; version: string | undefined }>> {
  const patient = found[parts.findIndex((p) => p.kind === 'patient')];
  const coverage = found[parts.findIndex((p) => p.kind === 'coverage')] as Coverage | undefined;
  // A Coverage found active is the plan the patient still has; one created, or one ended and active again, may succeed another.
  // A patient every sender shares (an OID authority) has other senders' plans, which this sender's record does not name.
  if (!insuredUnder || !patient?.id || coverage?.status === 'active' || sharedPatient(check)) return [];
  const current = await insuredUnder();
  if (!current) return [];
  // `patient` (Coverage.beneficiary), the parameter US Core charts must support, as the FHIR trigger searches.
  const stored = await client.findAll(`Coverage?patient=${encodeURIComponent(`Patient/${patient.id}`)}&status=active&_count=100`);
  return stored.flatMap((resource) => {
    const ended = resource.resourceType === 'Coverage' && resource.id ? endedCoverage(resource as Coverage, check, current) : undefined;
    return ended && r4Errors(ended).length === 0 ? [{ resource: ended, id: resource.id as string, version: resource.meta?.versionId }] : [];
  });
}

/**
 * What was found under a former identifier, when it can be given the current one: one whose
 * rekey R4 refuses would keep the former identifier, and another practice's patient with that
 * number would be written against it too. Left alone, a resource of its own is created instead.
 */
function takenOver(former: Resource | undefined, rekey: Rekey | undefined): Resource | undefined {
  const update = former && rekey && rekeyed(former as Patient | Coverage, rekey);
  return update && r4Errors(update).length === 0 ? former : undefined;
}

/** A found Patient given this plugin's current identifier (a rekey) and brought up to date, or undefined when neither changes it. */
function patientUpdate(stored: Patient, rekey: Rekey | undefined, check: EligibilityCheck): Patient | undefined {
  const base = rekey && rekeyed(stored, rekey);
  return updatedPatient(base ?? stored, patientResource(check)) ?? base;
}

function coverageUpdate(stored: Coverage, rekey: Rekey | undefined, fresh: Coverage, datesDeleted: boolean): Coverage | undefined {
  const rekeyedCoverage = rekey && rekeyed(stored, rekey);
  const base = rekeyedCoverage && forBeneficiary(rekeyedCoverage, fresh.beneficiary);
  return updatedCoverage(base ?? stored, fresh, datesDeleted) ?? base;
}

function once<T>(make: () => T): () => T {
  let made: T | undefined;
  return () => (made ??= make());
}

/** The resource with the transaction's urn:uuid references replaced by what the server made of them. */
function rewrite<T extends Resource>(resource: T, final: (ref: string) => string): T {
  return JSON.parse(JSON.stringify(resource, (key, v: unknown) => (key === 'reference' && typeof v === 'string' ? final(v) : v))) as T;
}
