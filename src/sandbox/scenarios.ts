/**
 * Verification scenarios, chosen by the subscriber's member id like a payer's test members
 * (case-insensitive). Any other member id gets a plausible Completed result derived from the
 * request, the same for the same member every time. Every result carries a disclaimer of type
 * Sandbox, so it cannot be mistaken for a real one.
 */
import { createHash } from 'node:crypto';
import { entries, type BenefitData, type Coinsurance, type ProblemDetails, type VerificationRequest, type VerificationResult } from '../verification/wire';
import type { SandboxPayer } from './network';
import { problemType } from './problems';

/** The failure kinds the service names (docs/service.md, Failure kinds). */
export const FAILURE_KINDS = [
  'InactivePatient',
  'Internal',
  'InvalidCredentials',
  'PatientDataSuppressed',
  'PatientNotEligible',
  'PatientNotFound',
  'ProviderNotFound',
  'SiteConfiguration',
  'SiteMaintenance',
  'ThirdPartyAdministrator',
  'TwoFactorAuthentication',
  'TwoFactorAuthenticationConfiguration',
  'Upstream',
] as const;

/** A kind the published list does not have, to show that unknown kinds are kept. */
export const UNLISTED_FAILURE_KIND = 'CoverageUnderReview';

export type Scenario =
  | { kind: 'full' }
  | { kind: 'minimal' }
  | { kind: 'out-of-network' }
  | { kind: 'partial' }
  | { kind: 'failed'; failure: string }
  | { kind: 'slow' }
  | { kind: 'unavailable' }
  | { kind: 'unavailable-twice' }
  | { kind: 'rate-limited-once' }
  | { kind: 'legacy-coinsurance' }
  | { kind: 'legacy-error' }
  | { kind: 'derived' };

export interface ScenarioEntry {
  memberId: string;
  scenario: Scenario;
  /** What a caller sees, as README lists it. */
  outcome: string;
}

export const SCENARIOS: ScenarioEntry[] = [
  { memberId: 'SBX-COMPLETE', scenario: { kind: 'full' }, outcome: 'Completed with every element of the result: maximums with carryover, deductibles, coinsurance ranges, frequencies, age limits, waiting periods, history, plan.assignment, verificationProvider (Participating), disclaimers with CarryOverDetails' },
  { memberId: 'SBX-MINIMAL', scenario: { kind: 'minimal' }, outcome: 'Completed from a portal that exposes little: plan status and one maximum, nothing else' },
  { memberId: 'SBX-OUT-OF-NETWORK', scenario: { kind: 'out-of-network' }, outcome: 'Completed; the provider is Non-Participating and figures are out of network' },
  { memberId: 'SBX-PARTIAL', scenario: { kind: 'partial' }, outcome: 'Partial: maximums and deductibles retrieved; contexts say the second portal gave no coinsurance or frequencies' },
  ...FAILURE_KINDS.map(
    (failure): ScenarioEntry => ({ memberId: `SBX-FAIL-${failure}`, scenario: { kind: 'failed', failure }, outcome: `Failed, problem type …/${failure}` }),
  ),
  { memberId: 'SBX-FAIL-UNLISTED', scenario: { kind: 'failed', failure: UNLISTED_FAILURE_KIND }, outcome: `Failed with a kind not in the published list (…/${UNLISTED_FAILURE_KIND})` },
  { memberId: 'SBX-SLOW', scenario: { kind: 'slow' }, outcome: 'Completed, after the slow delay (synchronous answer held back; asynchronous completion later)' },
  { memberId: 'SBX-503', scenario: { kind: 'unavailable' }, outcome: 'HTTP 503 problem details with Retry-After, every time' },
  { memberId: 'SBX-503-TWICE', scenario: { kind: 'unavailable-twice' }, outcome: 'HTTP 503 the first two times the same request is sent (same externalId, or same body), then 201 Completed' },
  { memberId: 'SBX-429-ONCE', scenario: { kind: 'rate-limited-once' }, outcome: 'HTTP 429 with Retry-After the first time, then 201 Completed' },
  { memberId: 'SBX-LEGACY-COINSURANCE', scenario: { kind: 'legacy-coinsurance' }, outcome: 'Completed, but coinsurance percentage.final written as v1 strings ("80%", "50-60")' },
  { memberId: 'SBX-LEGACY-ERROR', scenario: { kind: 'legacy-error' }, outcome: 'Failed, but the result in the v1 shape (details.code / details.message)' },
];

const BY_MEMBER = new Map(SCENARIOS.map((s) => [s.memberId.toUpperCase(), s.scenario]));

/** SBX-FAIL- followed by a kind the list above does not have: Failed with that kind, as the service may add kinds. */
const ANY_FAILURE = /^SBX-FAIL-(.*)$/i;
/** A kind as the service writes them (PascalCase words); it becomes the last segment of the problem type. */
export const FAILURE_KIND_TEXT = /^[A-Za-z][A-Za-z0-9]*$/;

export function scenarioFor(memberId: string | undefined): Scenario {
  const id = memberId?.trim() ?? '';
  const listed = BY_MEMBER.get(id.toUpperCase());
  if (listed) return listed;
  const failure = ANY_FAILURE.exec(id)?.[1];
  return failure === undefined ? { kind: 'derived' } : { kind: 'failed', failure };
}

// ---------------------------------------------------------------- failures

const FAILURES: Record<string, { title: string; status: number; detail: string; upstream: string }> = {
  InactivePatient: { title: 'Inactive patient', status: 422, detail: 'Coverage is not active on the date of service.', upstream: 'Member coverage terminated before the date of service.' },
  Internal: { title: 'Internal error', status: 500, detail: 'The verification could not be completed because of an internal error.', upstream: 'Unexpected error while reading the benefits page.' },
  InvalidCredentials: { title: 'Invalid credentials', status: 401, detail: 'The payer portal refused the stored credentials.', upstream: 'Login failed: the user name or password is incorrect.' },
  PatientDataSuppressed: { title: 'Patient data suppressed', status: 422, detail: 'The payer does not show this member\'s benefits online.', upstream: 'Benefits for this member are available by phone only.' },
  PatientNotEligible: { title: 'Patient not eligible', status: 422, detail: 'The payer reports the patient as not eligible.', upstream: 'Member is not eligible for dental benefits.' },
  PatientNotFound: { title: 'Patient not found', status: 404, detail: 'The payer found no member matching the patient and subscriber details.', upstream: 'No member found for the given member id, name and date of birth.' },
  ProviderNotFound: { title: 'Provider not found', status: 404, detail: 'The payer does not know the provider under this office.', upstream: 'Provider NPI is not associated with the office account.' },
  SiteConfiguration: { title: 'Site configuration required', status: 422, detail: 'The portal account must be configured before it can be used.', upstream: 'The portal asks to accept updated terms of use.' },
  SiteMaintenance: { title: 'Site maintenance', status: 503, detail: 'The payer portal is down for maintenance.', upstream: 'The portal shows a scheduled maintenance page.' },
  ThirdPartyAdministrator: { title: 'Third-party administrator', status: 422, detail: 'This plan\'s benefits are administered by a third party.', upstream: 'Plan administered by a third-party administrator; contact the administrator.' },
  TwoFactorAuthentication: { title: 'Two-factor authentication', status: 504, detail: 'The portal\'s second factor did not arrive in time.', upstream: 'No verification code received within the time limit.' },
  TwoFactorAuthenticationConfiguration: { title: 'Two-factor authentication configuration', status: 422, detail: 'The portal\'s two-factor method does not match the registration.', upstream: 'The portal now sends codes by SMS; the registration has no phone number.' },
  Upstream: { title: 'Upstream error', status: 502, detail: 'The payer\'s system returned an error.', upstream: 'The payer portal answered with an error page.' },
};

/** A Failed result: problem details whose type ends in the failure kind. */
export function failureResult(kind: string, portalId: string | undefined): ProblemDetails {
  const known = FAILURES[kind] ?? {
    title: 'Verification not completed',
    status: 422,
    detail: kind === UNLISTED_FAILURE_KIND ? 'The payer has this coverage under review.' : `The verification failed (${kind}).`,
    upstream: kind === UNLISTED_FAILURE_KIND ? 'Coverage under review by the payer.' : `The portal reported ${kind}.`,
  };
  return {
    type: problemType(kind),
    title: known.title,
    status: known.status,
    detail: known.detail,
    upstreamErrors: [{ detail: known.upstream, ...(portalId ? { portalId } : {}) }],
  };
}

/** The v1 error shape some deployments still send; the client is to normalise it. */
export function legacyFailureResult(): Record<string, unknown> {
  return { details: { code: 'PatientNotFound', message: 'No member found for the given member id, name and date of birth.' } };
}

// ---------------------------------------------------------------- results

export interface ResultContext {
  request: VerificationRequest;
  payer: SandboxPayer;
  portalId: string;
  /** The clinic the request named (assignment office, provider address fallback). */
  clinic?: { clinicId: string; name?: string | null | undefined; address?: Record<string, unknown> | null | undefined } | undefined;
}

const SANDBOX_DISCLAIMER = {
  type: 'Sandbox',
  text: 'Synthetic result from the embedded sandbox of the verification service; not real coverage data.',
};

const pct = (start: number, end = start) => ({ final: { start, end } });

function benefitYear(dateOfService: string): { start: string; end: string; year: number } {
  const year = Number(dateOfService.slice(0, 4));
  return { start: `${year}-01-01`, end: `${year}-12-31`, year };
}

function echoPeople(request: VerificationRequest): Pick<VerificationResult, 'patient' | 'subscriber'> {
  const { patient, subscriber } = request;
  return {
    patient: {
      firstName: patient.firstName,
      lastName: patient.lastName,
      dateOfBirth: patient.dateOfBirth,
      memberId: patient.memberId ?? subscriber.memberId,
      relationship: subscriber.relationship,
    },
    subscriber: {
      firstName: subscriber.firstName,
      lastName: subscriber.lastName,
      ...(subscriber.dateOfBirth ? { dateOfBirth: subscriber.dateOfBirth } : {}),
      memberId: subscriber.memberId,
      // The request's relationship is the patient's to the subscriber: the subscriber is its own.
      relationship: 'Self',
    },
  };
}

function planPayer(payer: SandboxPayer) {
  return { name: payer.name, payerId: payer.commonPayerId, phone: payer.phone };
}

function provider(ctx: ResultContext, participation: 'Participating' | 'Non-Participating') {
  const p = ctx.request.provider;
  return {
    firstName: p?.firstName ?? 'Dana',
    middleName: 'R',
    lastName: p?.lastName ?? 'Okafor',
    taxId: p?.taxId ?? '12-3456789',
    address: { line1: '120 Main St', line2: 'Suite 200', city: 'Springfield', state: 'IL', postalCode: '62701' },
    participation: { status: participation },
  };
}

/** SBX-COMPLETE: every element of the assumed InsuranceVerificationV3 shape, Partial's contexts aside. */
export function fullResult(ctx: ResultContext): VerificationResult {
  const by = benefitYear(ctx.request.dateOfService);
  const data: BenefitData = {
    maximums: [
      { type: 'Annual', scope: 'Individual', network: 'InNetwork', category: 'General', amount: 1500, usedAmount: 300, remainingAmount: 1200, carryoverAmount: 250, remainingCarryoverAmount: 250 },
      { type: 'Annual', scope: 'Individual', network: 'OutOfNetwork', category: 'General', amount: 1000, usedAmount: 300, remainingAmount: 700 },
      { type: 'Lifetime', scope: 'Individual', network: 'InNetwork', category: 'Orthodontics', amount: 2000, usedAmount: 0, remainingAmount: 2000 },
    ],
    deductibles: [
      { type: 'Annual', scope: 'Individual', network: 'InNetwork', amount: 50, usedAmount: 50, remainingAmount: 0, waivedCategories: ['Preventive', 'Diagnostic'] },
      { type: 'Annual', scope: 'Family', network: 'InNetwork', amount: 150, usedAmount: 50, remainingAmount: 100, waivedCategories: ['Preventive', 'Diagnostic'] },
      { type: 'Lifetime', scope: 'Individual', network: 'InNetwork', amount: 50, usedAmount: 0, remainingAmount: 50 },
    ],
    coinsurance: [
      { category: 'Diagnostic', network: 'InNetwork', procedureCodes: ['D0120', 'D0150', 'D0210', 'D0274'], percentage: pct(100) },
      { category: 'Preventive', network: 'InNetwork', procedureCodes: ['D1110', 'D1120', 'D1206', 'D1351'], percentage: pct(100) },
      { category: 'Basic', network: 'InNetwork', procedureCodes: ['D2140', 'D2391'], percentage: pct(80) },
      { category: 'Restorative', network: 'InNetwork', procedureCodes: ['D2330', 'D2392'], percentage: pct(70, 80) },
      { category: 'Endodontics', network: 'InNetwork', procedureCodes: ['D3310', 'D3330'], percentage: pct(80) },
      { category: 'Periodontics', network: 'InNetwork', procedureCodes: ['D4341', 'D4910'], percentage: pct(80) },
      { category: 'OralSurgery', network: 'InNetwork', procedureCodes: ['D7140', 'D7210'], percentage: pct(80) },
      { category: 'Major', network: 'InNetwork', procedureCodes: ['D2740', 'D2750'], percentage: pct(50, 60) },
      { category: 'Prosthodontics', network: 'InNetwork', procedureCodes: ['D5110', 'D6010'], percentage: pct(50) },
      { category: 'Orthodontics', network: 'InNetwork', procedureCodes: ['D8080', 'D8090'], percentage: pct(50) },
      { category: 'Major', network: 'OutOfNetwork', procedureCodes: ['D2740'], percentage: pct(40) },
    ],
    frequencies: [
      { procedureCodes: ['D1110', 'D1120'], category: 'Preventive', limit: 2, period: 'CalendarYear', used: 1, lastServiceDate: `${by.year}-02-10`, description: 'Prophylaxis twice per calendar year' },
      { procedureCodes: ['D0274'], category: 'Diagnostic', limit: 1, period: 'CalendarYear', used: 0, description: 'Bitewing x-rays once per calendar year' },
      { procedureCodes: ['D0330'], category: 'Diagnostic', limit: 1, period: 'Months', periodLength: 60, used: 1, lastServiceDate: `${by.year - 2}-05-04`, description: 'Panoramic x-ray once every 60 months' },
      { procedureCodes: ['D2740'], category: 'Major', limit: 1, period: 'Months', periodLength: 84, used: 0, description: 'Crown replacement once per tooth every 84 months' },
      { procedureCodes: ['D0150'], category: 'Diagnostic', limit: 1, period: 'Lifetime', used: 1, lastServiceDate: `${by.year - 4}-09-17`, description: 'Comprehensive oral evaluation once per lifetime per provider' },
    ],
    ageLimits: [
      { procedureCodes: ['D1206', 'D1208'], category: 'Preventive', maxAge: 18 },
      { procedureCodes: ['D1351'], category: 'Preventive', maxAge: 15 },
      { procedureCodes: ['D8080', 'D8090'], category: 'Orthodontics', minAge: 7, maxAge: 19 },
    ],
    waitingPeriods: [
      { category: 'Major', months: 12, endsOn: `${by.year - 1}-03-01` },
      { category: 'Orthodontics', months: 24, endsOn: `${by.year + 1}-03-01` },
    ],
    history: [
      { procedureCode: 'D1110', date: `${by.year}-02-10` },
      { procedureCode: 'D0274', date: `${by.year - 1}-08-22` },
      { procedureCode: 'D2392', date: `${by.year - 1}-08-22`, tooth: '30', surface: 'MO' },
      { procedureCode: 'D2740', date: `${by.year - 3}-11-05`, tooth: '3' },
    ],
  };
  return {
    ...echoPeople(ctx.request),
    plan: {
      name: `${ctx.payer.name} ${ctx.payer.planType}`,
      type: ctx.payer.planType,
      groupNumber: ctx.request.subscriber.groupNumber ?? 'GRP-778812',
      groupName: 'Acme Manufacturing Employees',
      status: 'Active',
      effectiveDate: `${by.year - 3}-01-01`,
      terminationDate: `${by.year + 1}-12-31`,
      benefitPeriod: { start: by.start, end: by.end },
      payer: planPayer(ctx.payer),
      assignment: {
        office: {
          name: ctx.clinic?.name ?? 'Bright Smiles Dental - Main St',
          address: { line1: '120 Main St', line2: 'Suite 200', city: 'Springfield', state: 'IL', postalCode: '62701' },
          officeId: ctx.clinic?.clinicId ?? 'OFF-0042',
        },
        provider: {
          firstName: ctx.request.provider?.firstName ?? 'Dana',
          lastName: ctx.request.provider?.lastName ?? 'Okafor',
          npi: ctx.request.provider?.npi ?? '1234567893',
        },
      },
    },
    data,
    verificationProvider: provider(ctx, 'Participating'),
    disclaimers: [
      {
        type: 'CarryOverDetails',
        text: 'Unused annual maximum up to $250 carries over to the next benefit year when at least one preventive visit was made.',
      },
      { type: 'General', text: 'Benefits quoted are not a guarantee of payment; claims are subject to eligibility on the date of service.' },
      SANDBOX_DISCLAIMER,
    ],
  };
}

/** SBX-MINIMAL: a portal that exposes almost nothing. */
export function minimalResult(ctx: ResultContext): VerificationResult {
  return {
    plan: { status: 'Active', payer: { name: ctx.payer.name } },
    data: { maximums: [{ type: 'Annual', scope: 'Individual', amount: 1000 }] },
    disclaimers: [SANDBOX_DISCLAIMER],
  };
}

/** SBX-OUT-OF-NETWORK: a Non-Participating provider; figures out of network. */
export function outOfNetworkResult(ctx: ResultContext): VerificationResult {
  const base = derivedResult(ctx);
  const oon = (list: ReadonlyArray<Record<string, unknown> | null> | null | undefined) => entries(list, (e) => ({ ...e, network: 'OutOfNetwork' }));
  return {
    ...base,
    data: {
      ...base.data,
      maximums: oon(base.data?.maximums),
      deductibles: oon(base.data?.deductibles),
      coinsurance: entries(base.data?.coinsurance, (c) => ({
        ...c,
        network: 'OutOfNetwork',
        percentage: pct(Math.max(0, (c.percentage?.final?.start ?? 0) - 20), Math.max(0, (c.percentage?.final?.end ?? 0) - 20)),
      })),
    },
    verificationProvider: provider(ctx, 'Non-Participating'),
  };
}

/** SBX-PARTIAL: the second portal gave nothing; contexts say what is missing. */
export function partialResult(ctx: ResultContext): VerificationResult {
  const base = derivedResult(ctx);
  const otherPortal = Object.values(ctx.payer.features)
    .flatMap((f) => f?.portals ?? [])
    .find((p) => p !== ctx.portalId);
  const missingFrom = otherPortal ?? ctx.portalId;
  return {
    ...base,
    data: { maximums: base.data?.maximums ?? null, deductibles: base.data?.deductibles ?? null },
    contexts: [
      { portalId: missingFrom, dataPoint: 'coinsurance', detail: 'Coinsurance could not be retrieved: the benefits page timed out.' },
      { portalId: missingFrom, dataPoint: 'frequencies', detail: 'Frequency limitations are not shown for this plan online.' },
      { dataPoint: 'history', detail: 'Treatment history is not available for this member.' },
    ],
  };
}

/** SBX-LEGACY-COINSURANCE: v1 strings in percentage.final. */
export function legacyCoinsuranceResult(ctx: ResultContext): Record<string, unknown> {
  const base = derivedResult(ctx);
  const strings = ['100%', '100', '80%', '50-60', '50 %'];
  return {
    ...base,
    data: {
      ...base.data,
      coinsurance: (base.data?.coinsurance ?? []).map((c, i) => ({ ...c, percentage: { final: strings[i % strings.length] } })),
    },
  };
}

function ageOn(dateOfBirth: string, on: string): number {
  const [by, bm, bd] = dateOfBirth.split('-').map(Number) as [number, number, number];
  const [y, m, d] = on.split('-').map(Number) as [number, number, number];
  return y - by - (m < bm || (m === bm && d < bd) ? 1 : 0);
}

/**
 * Any other member: a plausible Completed result, derived from the request and the payer, the
 * same for the same member and payer every time.
 */
export function derivedResult(ctx: ResultContext): VerificationResult {
  const { request, payer } = ctx;
  const h = createHash('sha256').update(`${request.subscriber.memberId.toUpperCase()}|${payer.primaryPayerId}`).digest();
  const pick = <T>(i: number, options: readonly T[]): T => options[(h[i] as number) % options.length] as T;
  const by = benefitYear(request.dateOfService);
  const age = ageOn(request.patient.dateOfBirth, request.dateOfService);
  const medicaid = payer.planType === 'Medicaid';
  const hmo = payer.planType === 'DHMO' || medicaid;

  const annual = pick(0, [1000, 1250, 1500, 2000, 2500] as const);
  const used = Math.min(annual, pick(1, [0, 0, 50, 125, 300, 450, 800] as const));
  const deductible = pick(2, [25, 50, 50, 75, 100] as const);
  const deductibleMet = (h[3] as number) % 3 === 0;
  const child = age < 19;
  const [basic, major] = pick(4, [[80, 50], [80, 50], [70, 50], [90, 60], [80, 40]] as const);

  const coinsurance: Coinsurance[] = [
    { category: 'Diagnostic', network: 'InNetwork', percentage: pct(100) },
    { category: 'Preventive', network: 'InNetwork', percentage: pct(100) },
    { category: 'Basic', network: 'InNetwork', percentage: pct(medicaid ? 100 : basic) },
    { category: 'Endodontics', network: 'InNetwork', percentage: pct(medicaid ? 100 : basic) },
    { category: 'Periodontics', network: 'InNetwork', percentage: pct(medicaid ? 100 : basic) },
    { category: 'OralSurgery', network: 'InNetwork', percentage: pct(medicaid ? 100 : basic) },
    { category: 'Major', network: 'InNetwork', percentage: pct(medicaid ? 100 : major) },
  ];
  if (child && !medicaid) coinsurance.push({ category: 'Orthodontics', network: 'InNetwork', percentage: pct(50) });

  const data: BenefitData = {
    maximums: medicaid
      ? []
      : [
          { type: 'Annual', scope: 'Individual', network: 'InNetwork', category: 'General', amount: annual, usedAmount: used, remainingAmount: annual - used },
          ...(child ? [{ type: 'Lifetime', scope: 'Individual', network: 'InNetwork', category: 'Orthodontics', amount: 1500, usedAmount: 0, remainingAmount: 1500 }] : []),
        ],
    deductibles: hmo
      ? []
      : [
          { type: 'Annual', scope: 'Individual', network: 'InNetwork', amount: deductible, usedAmount: deductibleMet ? deductible : 0, remainingAmount: deductibleMet ? 0 : deductible, waivedCategories: ['Preventive', 'Diagnostic'] },
          { type: 'Annual', scope: 'Family', network: 'InNetwork', amount: deductible * 3, usedAmount: deductibleMet ? deductible : 0, remainingAmount: deductible * 3 - (deductibleMet ? deductible : 0), waivedCategories: ['Preventive', 'Diagnostic'] },
        ],
    coinsurance,
    frequencies: [
      { procedureCodes: ['D1110', 'D1120'], category: 'Preventive', limit: 2, period: 'CalendarYear', description: 'Prophylaxis twice per calendar year' },
      { procedureCodes: ['D0274'], category: 'Diagnostic', limit: 1, period: 'CalendarYear', description: 'Bitewing x-rays once per calendar year' },
      { procedureCodes: ['D0330'], category: 'Diagnostic', limit: 1, period: 'Months', periodLength: 60, description: 'Panoramic x-ray once every 60 months' },
    ],
    ageLimits: [
      { procedureCodes: ['D1206', 'D1208'], category: 'Preventive', maxAge: pick(5, [14, 16, 18] as const) },
      { procedureCodes: ['D1351'], category: 'Preventive', maxAge: 15 },
    ],
    waitingPeriods: (h[6] as number) % 4 === 0 ? [{ category: 'Major', months: 12, endsOn: `${by.year}-07-01` }] : [],
  };

  return {
    ...echoPeople(request),
    plan: {
      name: `${payer.name} ${payer.planType}`,
      type: payer.planType,
      ...(request.subscriber.groupNumber ? { groupNumber: request.subscriber.groupNumber } : {}),
      status: 'Active',
      effectiveDate: `${by.year - pick(7, [0, 1, 2, 5] as const)}-01-01`,
      benefitPeriod: { start: by.start, end: by.end },
      payer: planPayer(payer),
      ...(hmo && ctx.clinic
        ? { assignment: { office: { name: ctx.clinic.name ?? null, officeId: ctx.clinic.clinicId } } }
        : {}),
    },
    data,
    ...(request.provider?.lastName ? { verificationProvider: provider(ctx, 'Participating') } : {}),
    disclaimers: [SANDBOX_DISCLAIMER],
  };
}
