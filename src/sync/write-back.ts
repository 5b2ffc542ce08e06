import { randomUUID } from 'node:crypto';
import type { CoverageEligibilityRequest, CoverageEligibilityResponse } from 'fhir/r4';
import * as z from 'zod';
import type { EligibilityCheck } from '../domain';
import { FhirInputError } from '../adapters/fhir/operation-outcome';
import { toCoverageEligibilityRequest, toCoverageEligibilityResponse } from '../adapters/fhir/out';
import { systemUrl } from '../adapters/fhir/systems';
import { assertValidR4 } from '../adapters/fhir/validate';
import type { VerificationOutcome } from '../verification/outcome';

/** What the server answered for the transaction; parsed permissively, we need only the ids. */
const TransactionEntry = z.looseObject({
  resource: z.looseObject({ id: z.string().min(1) }).optional(),
  response: z.looseObject({ location: z.string().optional() }).optional(),
});
const TransactionAnswer = z.looseObject({ entry: z.array(TransactionEntry).length(2) });

/** The chart resources a check's results belong to; a FHIR-sourced check names its own. */
export interface ChartRefs {
  patient?: string;
  coverage?: string;
  insurer?: string;
}

export interface WrittenEligibility {
  requestId: string;
  responseId: string;
  request: CoverageEligibilityRequest;
  response: CoverageEligibilityResponse;
}

export interface EligibilityWriter {
  write(check: EligibilityCheck, outcome: VerificationOutcome, refs?: ChartRefs): Promise<WrittenEligibility>;
}

type FhirKitClient = InstanceType<typeof import('fhir-kit-client', { with: { 'resolution-mode': 'import' } }).Client>;

/**
 * Writes a verification's CoverageEligibilityRequest and Response into the chart through
 * fhir-kit-client, as one transaction. Both are validated against R4 (Medplum and the official
 * JSON schema) before anything is sent, and each is created conditionally on its correlation
 * identifier (ifNoneExist), so writing the same result again, after a crash or a retry, never
 * makes a second resource.
 */
export async function fhirWriter(baseUrl: string, options: { bearerToken?: string } = {}): Promise<EligibilityWriter> {
  const { Client } = await import('fhir-kit-client');
  const client: FhirKitClient = new Client({ baseUrl, ...(options.bearerToken ? { bearerToken: options.bearerToken } : {}) });
  return {
    async write(check, outcome, refs = {}) {
      const source = check.source.kind === 'fhir' ? check.source : undefined;
      const patient = refs.patient ?? source?.patient;
      const coverage = refs.coverage ?? source?.coverage;
      if (!patient || !coverage) {
        throw new FhirInputError([{ expression: patient ? 'Coverage' : 'Patient', diagnostics: 'the chart resource for this check is not known; pass it in refs', code: 'required' }]);
      }
      const requestUrn = `urn:uuid:${randomUUID()}`;
      const request = toCoverageEligibilityRequest(
        check,
        { patient, coverage, ...(refs.insurer ? { insurer: refs.insurer } : {}) },
        { correlationId: outcome.verification.correlationId },
      );
      const response = toCoverageEligibilityResponse(outcome, { patient, coverage, request: requestUrn, insurer: refs.insurer, payer: check.coverage.payer });
      // Both are built and validated before anything is sent: the chart gets the pair or nothing.
      assertValidR4(request);
      assertValidR4(response);
      const answer = await client.transaction({
        body: {
          resourceType: 'Bundle',
          type: 'transaction',
          entry: [
            { fullUrl: requestUrn, resource: { ...request }, request: { method: 'POST', url: 'CoverageEligibilityRequest', ifNoneExist: conditionOn(request) } },
            { resource: { ...response }, request: { method: 'POST', url: 'CoverageEligibilityResponse', ifNoneExist: conditionOn(response) } },
          ],
        },
      });
      const parsed = TransactionAnswer.safeParse(answer);
      const [requestId, responseId] = parsed.success ? parsed.data.entry.map((e) => idFrom(e)) : [];
      if (!requestId || !responseId) throw new Error('write eligibility: the FHIR server answered the transaction without resource ids');
      return { requestId, responseId, request, response };
    },
  };
}

/**
 * Created once per verification (its correlation id), not per check: the same result written
 * again matches the first write, and a new verification of the same check gets its own pair.
 */
function conditionOn(resource: CoverageEligibilityRequest | CoverageEligibilityResponse): string {
  const system = systemUrl('correlationId');
  const id = resource.identifier?.find((i) => i.system === system && i.value);
  if (!id) throw new FhirInputError([{ expression: `${resource.resourceType}.identifier`, diagnostics: 'needs the verification correlation id to be written idempotently', code: 'required' }]);
  return `identifier=${system}|${id.value}`;
}

function idFrom(entry: z.infer<typeof TransactionEntry>): string | undefined {
  return entry.resource?.id ?? /\/([^/]+)\/_history\//.exec(entry.response?.location ?? '')?.[1] ?? entry.response?.location?.split('/').pop();
}
