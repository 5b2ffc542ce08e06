/**
 * Wire shapes of the verification service, v2.
 *
 * This is the ONE module that holds assumptions about bodies the interface leaves "not shown"
 * (docs/service.md sets them out). Names the interface gives are used exactly.
 * Requests we send are strict: a typo fails here, not at the service. Responses are permissive:
 * unknown fields are kept, optional everywhere the portal may not expose a value, and enums the
 * interface does not fix are plain strings (known values are listed beside them), so that a new
 * value from the service is carried through and surfaced, never rejected.
 */
import * as z from 'zod';
import { describeIssue } from '../domain/issues';
import { dayWritten, IsoDate, isFhirDate, isValidNpi } from '../domain/primitives';

const Str = z.string();
/** An id the service gives and we key on (in URLs, in the chart's identifiers): a blank one names nothing. */
export const Id = Str.regex(/\S/, { error: 'must not be blank' }).regex(/^[^\u0000-\u001f\u007f]*$/, { error: 'must not hold control characters' });
/** A URI or code the service gives, which it may pad with whitespace that is not part of it. */
const Token = Str.trim();
const Opt = <T extends z.ZodType>(t: T) => t.optional().nullable();
/**
 * A timestamp the service gives (createdAt, completedAt, ...). The interface shows none and the
 * sandbox writes `Z`, but a .NET or Java service writes `+0000`, or no offset at all: read in any
 * of ISO 8601's forms (`+hhmm` or `+hh` as `+hh:mm`, a time to the minute as at its second 0, a space
 * for the T), and a date-time without an offset as UTC, the only reading a cloud service's clock has
 * (it is in no practice's zone). Anything else is kept as given, for the chart's response to keep as sent.
 */
const Timestamp = Str.transform((text) => {
  const [, date, minute, second = ':00', offset] = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2})(:\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/.exec(text) ?? [];
  if (date === undefined) return text;
  const time = `${date}T${minute}${second}`;
  if (offset === undefined || offset === 'Z') return `${time}Z`;
  const digits = offset.replace(':', '');
  return `${time}${digits.slice(0, 3)}:${digits.slice(3) || '00'}`;
});
/**
 * A date a result gives: to the year, month or day (a plan terminating 2026-12 ends with December),
 * or at a day's first or last moment (dayWritten); blank is one the portal does not know. Any other
 * (03/02/2026, a time of day in a zone not said) is not read: left out and kept as sent (outcome.ts),
 * the rest of the result charted.
 */
const ResultDate = Str.refine((text) => text.trim() === '' || isFhirDate(dayWritten(text)), { error: 'must be a date (YYYY-MM-DD)' });
/** A number as portals give it: 1500, or "1500.00" when a portal's figure arrives as text. */
const Num = z.union([z.number(), Str.trim().regex(/^-?\d+(\.\d+)?$/).transform(Number)]);
/**
 * Digits a service may write as a JSON number (a tooth 14, a group number 123456, a ZIP 60601): read as their text.
 * Only a whole number JSON.parse holds exactly (int is safe integers alone): 12345678901234567890 parses
 * to 12345678901234567000, another member's id, and 1e21, 14.5 or -5 are digits of no id.
 */
const Digits = z.union([Str, z.number().int().nonnegative().transform(String)]);

// ---------------------------------------------------------------- shared pieces

export const Address = z.strictObject({
  line1: Str.min(1),
  line2: Str.optional(),
  city: Str.min(1),
  state: Str.regex(/^[A-Z]{2}$/, { error: 'must be a two-letter state code' }),
  postalCode: Str.regex(/^\d{5}(-\d{4})?$/, { error: 'must be a ZIP or ZIP+4' }),
});
export type Address = z.infer<typeof Address>;

const AddressOut = z.looseObject({
  line1: Opt(Str),
  line2: Opt(Str),
  city: Opt(Str),
  state: Opt(Str),
  postalCode: Opt(Digits),
});

/**
 * An array read item by item: an item that cannot be read is left out and named in `unreadable`
 * (`at`.index, where and what, never its value), so one odd payer or registration does not hide
 * the rest of a list or stop the payer catalog from refreshing or loading.
 */
export const eachReadable = <T extends z.ZodType>(item: T, at: string) =>
  z.array(z.unknown()).transform((items) => {
    const read: z.output<T>[] = [];
    const unreadable: string[] = [];
    items.forEach((raw, index) => {
      const parsed = item.safeParse(raw);
      if (parsed.success) read.push(parsed.data);
      else unreadable.push(describeIssue(parsed.error, at, [at, index]));
    });
    return { read, unreadable };
  });

/**
 * A page of a listing; items that cannot be read are left out and named (eachReadable). `items`
 * null is an empty page, as a service that writes nulls for what it has none of sends it; missing,
 * the body is not a listing.
 */
export const pageOf = <T extends z.ZodType>(item: T) =>
  z.looseObject({ items: z.preprocess((items) => (items === null ? [] : items), eachReadable(item, 'items')), nextCursor: Opt(Str) }).transform(({ items, ...page }) => ({
    ...page,
    items: items.read,
    ...(items.unreadable.length > 0 && { unreadable: items.unreadable }),
  }));
export type Page<T> = { items: T[]; nextCursor?: string | null | undefined; unreadable?: string[] | undefined };

export const PageQuery = z.strictObject({
  limit: z.number().int().positive().max(500).optional(),
  cursor: Str.optional(),
});
export type PageQuery = z.infer<typeof PageQuery>;

// ---------------------------------------------------------------- problem details (RFC 9457)

export const FieldError = z.looseObject({ field: Opt(Str), message: Opt(Str), code: Opt(Str) });
export type FieldError = z.infer<typeof FieldError>;

export const UpstreamError = z.looseObject({ detail: Opt(Str), portalId: Opt(Str) });
export type UpstreamError = z.infer<typeof UpstreamError>;

export const ProblemDetails = z.looseObject({
  type: Opt(Token),
  title: Opt(Str),
  status: Opt(Num),
  detail: Opt(Str),
  instance: Opt(Token),
  upstreamErrors: Opt(z.array(UpstreamError)),
  errors: Opt(z.array(FieldError)),
});
export type ProblemDetails = z.infer<typeof ProblemDetails>;

/**
 * Problem details as a failed verification or a ServiceError carries them on (outcome.ts): the
 * status is the HTTP status code (RFC 9457), written to the chart as an integer. Only there: a
 * credentials validation's result with any other status is still read.
 */
export const HttpProblemDetails = ProblemDetails.extend({ status: Opt(Num.pipe(z.number().int().min(100).max(599))) });

// ---------------------------------------------------------------- organizations and clinics

export const CreateOrganizationRequest = z.strictObject({
  customerId: Str.min(1),
  name: Str.min(1),
});
export type CreateOrganizationRequest = z.infer<typeof CreateOrganizationRequest>;

export const Organization = z.looseObject({
  organizationId: Str,
  customerId: Opt(Str),
  name: Opt(Str),
  createdAt: Opt(Timestamp),
});
export type Organization = z.infer<typeof Organization>;

/** An NPI a person typed: ten digits whose last is the Luhn check digit, so a typo is caught before it is sent. */
const TypedNpi = Str.regex(/^\d{10}$/, { error: 'must be 10 digits', abort: true }).refine(isValidNpi, { error: 'fails the NPI check digit (a typo?)' });

export const CreateClinicRequest = z.strictObject({
  organizationId: Str.min(1),
  name: Str.min(1),
  npi: TypedNpi.optional(),
  taxId: Str.regex(/^\d{2}-?\d{7}$/, { error: 'must be a 9-digit EIN' }).optional(),
  address: Address.optional(),
});
export type CreateClinicRequest = z.infer<typeof CreateClinicRequest>;

export const Clinic = z.looseObject({
  clinicId: Str,
  organizationId: Opt(Str),
  name: Opt(Str),
  npi: Opt(Str),
  taxId: Opt(Str),
  address: Opt(AddressOut),
  createdAt: Opt(Timestamp),
});
export type Clinic = z.infer<typeof Clinic>;

// ---------------------------------------------------------------- payer and portal network

/** Feature keys of a payer entry; `insuranceVerificationAsynchronous` is the service's own name. */
export const FEATURE_SYNC = 'insuranceVerificationSynchronous';
export const FEATURE_ASYNC = 'insuranceVerificationAsynchronous';

export const PayerFeature = z.looseObject({
  supported: Opt(z.boolean()),
  portals: Opt(z.array(Str)),
  /** e.g. OfficeName, OfficeAddress, OfficeSuite, OfficeTaxId, ProviderFirstName, ProviderLastName, ProviderNpi, OrganizationNpi */
  requirements: Opt(z.array(Str)),
});
export type PayerFeature = z.infer<typeof PayerFeature>;

export const Payer = z.looseObject({
  /** Six alphanumerics, stable; for syncing lists only, never accepted in a request. The catalog keys on it. */
  primaryPayerId: Id,
  /** Industry-wide and NOT unique: one common id can cover several plans. */
  commonPayerId: Opt(Str),
  alternatePayerIds: Opt(z.array(Str)),
  name: Str,
  /**
   * The map holds more features than the two read here, whose shapes nobody has shown: one of them as `true`
   * or null would otherwise leave the whole payer out of the catalog, and every check of its members unresolved.
   */
  features: Opt(z.looseObject({ [FEATURE_SYNC]: Opt(PayerFeature), [FEATURE_ASYNC]: Opt(PayerFeature) })),
  createdAt: Opt(Timestamp),
  updatedAt: Opt(Timestamp),
});
export type Payer = z.infer<typeof Payer>;

export const NetworkQuery = PageQuery.extend({
  updatedSince: z.iso.datetime({ offset: true }).optional(),
});
export type NetworkQuery = z.infer<typeof NetworkQuery>;

/** Known values: TwoFactorEmail, TwoFactorSms. Known login methods: Native, SSO. */
export const Portal = z.looseObject({
  portalId: Str,
  name: Opt(Str),
  url: Opt(Str),
  requiresAuthentication: Opt(z.boolean()),
  authenticationMethods: Opt(z.array(Str)),
  loginMethods: Opt(z.array(Str)),
  createdAt: Opt(Timestamp),
  updatedAt: Opt(Timestamp),
});
export type Portal = z.infer<typeof Portal>;

// ---------------------------------------------------------------- portal registrations and 2FA messages

export const CreateRegistrationRequest = z.strictObject({
  portalId: Str.min(1),
  clinicId: Str.min(1),
  forwardingEmail: z.email({ error: 'must be an email address' }).optional(),
});
export type CreateRegistrationRequest = z.infer<typeof CreateRegistrationRequest>;

export const Registration = z.looseObject({
  correlationId: Id,
  portalId: Opt(Str),
  clinicId: Opt(Str),
  registeredEmail: Str,
  /** Only for portals whose 2FA is SMS. */
  registeredPhoneNumber: Opt(Str),
  status: Opt(Str),
  createdAt: Opt(Timestamp),
  updatedAt: Opt(Timestamp),
});
export type Registration = z.infer<typeof Registration>;

/**
 * A 2FA message as listed. The interface shows none of its fields and nothing here reads its id:
 * one the service does not give leaves the code a person waits for shown all the same.
 */
export const Email = z.looseObject({
  id: Opt(Str),
  correlationId: Opt(Str),
  from: Opt(Str),
  to: Opt(Str),
  subject: Opt(Str),
  body: Opt(Str),
  receivedAt: Opt(Timestamp),
});
export type Email = z.infer<typeof Email>;

/** As Email: its id may be absent. */
export const SmsMessage = z.looseObject({
  id: Opt(Str),
  correlationId: Opt(Str),
  from: Opt(Str),
  to: Opt(Str),
  body: Opt(Str),
  receivedAt: Opt(Timestamp),
});
export type SmsMessage = z.infer<typeof SmsMessage>;

export const MessagesQuery = PageQuery.extend({
  since: z.iso.datetime({ offset: true }).optional(),
});
export type MessagesQuery = z.infer<typeof MessagesQuery>;

// ---------------------------------------------------------------- credentials and their validation

export const LoginMethod = z.enum(['Native', 'SSO']);
export type LoginMethod = z.infer<typeof LoginMethod>;

export const CredentialsRequest = z.strictObject({
  username: Str.min(1),
  password: Str.min(1),
  loginMethod: LoginMethod,
  mfaEmail: z.email({ error: 'must be an email address' }).optional(),
  mfaPhoneNumber: Str.regex(/^\+[1-9]\d{7,14}$/, { error: 'must be an E.164 phone number' }).optional(),
});
export type CredentialsRequest = z.infer<typeof CredentialsRequest>;

export const CredentialsPatch = CredentialsRequest.partial().refine((p) => Object.keys(p).length > 0, {
  error: 'must change at least one field',
});
export type CredentialsPatch = z.infer<typeof CredentialsPatch>;

/**
 * The stored record. The interface has GET "retrieve" credentials whose fields are username and
 * password: a password the service sends back is read as passwordSet and goes no further, so no
 * record printed, logged or kept holds it.
 */
export const CredentialsRecord = z
  .looseObject({
    clinicId: Opt(Str),
    portalId: Opt(Str),
    // Optional as every field of it: the same schema reads what POST and PATCH answer, which the interface does not show,
    // and their 201 or 200 says the credentials were stored whatever the body holds.
    username: Opt(Str),
    passwordSet: Opt(z.boolean()),
    loginMethod: Opt(Str),
    mfaEmail: Opt(Str),
    mfaPhoneNumber: Opt(Str),
    updatedAt: Opt(Timestamp),
  })
  // A null is a service writing null for what it never sends back: it says nothing of whether one is stored.
  .transform(({ password, ...record }) => (password === undefined || password === null ? record : { ...record, passwordSet: record.passwordSet ?? password !== '' }));
export type CredentialsRecord = z.infer<typeof CredentialsRecord>;

export const InlineCredentials = z.strictObject({
  username: Str.min(1),
  password: Str.min(1),
});
export type InlineCredentials = z.infer<typeof InlineCredentials>;

export const CredentialsValidationRequest = z.union([
  z.strictObject({ clinicId: Str.min(1), portalId: Str.min(1) }),
  z.strictObject({ portalId: Str.min(1), credentials: InlineCredentials }),
]);
export type CredentialsValidationRequest = z.infer<typeof CredentialsValidationRequest>;

/** Known statuses: Pending, Valid, Invalid; result is problem details when Invalid. */
export const CredentialsValidation = z.looseObject({
  correlationId: Id,
  status: Str,
  result: Opt(ProblemDetails),
});
export type CredentialsValidation = z.infer<typeof CredentialsValidation>;

// ---------------------------------------------------------------- verification requests

export const WireRelationship = z.enum(['Self', 'Spouse', 'Child', 'Other']);
export type WireRelationship = z.infer<typeof WireRelationship>;

const RequestPerson = {
  firstName: Str.min(1),
  middleName: Str.optional(),
  lastName: Str.min(1),
};

export const VerificationRequest = z
  .strictObject({
    clinicId: Str.min(1).optional(),
    portalId: Str.min(1).optional(),
    credentials: InlineCredentials.optional(),
    payer: z.strictObject({ payerId: Str.min(1).optional(), name: Str.min(1).optional() }),
    patient: z.strictObject({
      ...RequestPerson,
      dateOfBirth: IsoDate,
      gender: z.enum(['F', 'M', 'U']).optional(),
      memberId: Str.min(1).optional(),
    }),
    subscriber: z.strictObject({
      ...RequestPerson,
      dateOfBirth: IsoDate.optional(),
      memberId: Str.min(1),
      relationship: WireRelationship,
      groupNumber: Str.min(1).optional(),
    }),
    provider: z
      .strictObject({
        npi: Str.regex(/^\d{10}$/, { error: 'must be 10 digits' }).optional(),
        taxId: Str.optional(),
        firstName: Str.optional(),
        lastName: Str.optional(),
      })
      .optional(),
    dateOfService: IsoDate,
    /** The plugin's idempotency key: makes a retried POST safe. */
    externalId: Str.min(1).optional(),
  })
  .refine((r) => r.credentials !== undefined || (r.clinicId !== undefined && r.portalId !== undefined), {
    error: 'needs clinicId and portalId (stored credentials) or credentials (inline)',
    path: ['clinicId'],
  })
  .refine((r) => Boolean(r.payer.payerId || r.payer.name), {
    error: 'needs a payerId or a name',
    path: ['payer'],
  });
export type VerificationRequest = z.infer<typeof VerificationRequest>;

/** Claims retrieval; bodies are not shown, so this is the smallest request that can work. */
export const ClaimRetrievalRequest = z.strictObject({
  clinicId: Str.min(1),
  portalId: Str.min(1),
  payer: z.strictObject({ payerId: Str.min(1).optional(), name: Str.min(1).optional() }),
  subscriber: z.strictObject({ ...RequestPerson, dateOfBirth: IsoDate.optional(), memberId: Str.min(1) }),
  patient: z.strictObject({ ...RequestPerson, dateOfBirth: IsoDate }),
  serviceDateFrom: IsoDate,
  serviceDateTo: IsoDate,
  externalId: Str.min(1).optional(),
});
export type ClaimRetrievalRequest = z.infer<typeof ClaimRetrievalRequest>;

/** Answer to an asynchronous request (verification, credentials validation, claims retrieval). */
export const Accepted = z.looseObject({ correlationId: Id, status: Opt(Str) });
export type Accepted = z.infer<typeof Accepted>;

// ---------------------------------------------------------------- InsuranceVerificationV3

/** Coinsurance: the share the PLAN pays, as a range; start equals end when the portal gives one value. */
export const PercentRange = z.looseObject({ start: Num, end: Num });
export type PercentRange = z.infer<typeof PercentRange>;

/** Dollars, as a number or as text, a dollar sign and thousands separators included ("$3,000.00"), as portals show them. */
const Money = z.union([Num, Str.trim().regex(/^-?\$ ?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?$|^-?\d{1,3}(,\d{3})+(\.\d+)?$/).transform((text) => Number(text.replace(/[$, ]/g, '')))]);

export const Maximum = z.looseObject({
  type: Opt(Str), // Annual | Lifetime
  scope: Opt(Str), // Individual | Family
  network: Opt(Str), // InNetwork | OutOfNetwork
  category: Opt(Str), // General | Orthodontics | ...
  amount: Opt(Money),
  usedAmount: Opt(Money),
  remainingAmount: Opt(Money),
  carryoverAmount: Opt(Money),
  remainingCarryoverAmount: Opt(Money),
});
export type Maximum = z.infer<typeof Maximum>;

export const Deductible = z.looseObject({
  type: Opt(Str),
  scope: Opt(Str),
  network: Opt(Str),
  amount: Opt(Money),
  usedAmount: Opt(Money),
  remainingAmount: Opt(Money),
  waivedCategories: Opt(z.array(Str)),
});
export type Deductible = z.infer<typeof Deductible>;

export const Coinsurance = z.looseObject({
  /** Diagnostic | Preventive | Basic | Restorative | Endodontics | Periodontics | OralSurgery | Major | Prosthodontics | Orthodontics */
  category: Opt(Str),
  network: Opt(Str),
  procedureCodes: Opt(z.array(Str)),
  /** finalText: a v1 percentage that is no number ("Not covered"), as outcome.ts keeps it. */
  percentage: Opt(z.looseObject({ final: Opt(PercentRange), finalText: Opt(Str) })),
});
export type Coinsurance = z.infer<typeof Coinsurance>;

export const Frequency = z.looseObject({
  procedureCodes: Opt(z.array(Str)),
  category: Opt(Str),
  limit: Opt(Num),
  period: Opt(Str), // CalendarYear | BenefitYear | Months | Lifetime
  periodLength: Opt(Num),
  used: Opt(Num),
  lastServiceDate: Opt(ResultDate),
  description: Opt(Str),
});
export type Frequency = z.infer<typeof Frequency>;

export const AgeLimit = z.looseObject({
  procedureCodes: Opt(z.array(Str)),
  category: Opt(Str),
  minAge: Opt(Num),
  maxAge: Opt(Num),
});
export type AgeLimit = z.infer<typeof AgeLimit>;

export const WaitingPeriod = z.looseObject({
  category: Opt(Str),
  months: Opt(Num),
  endsOn: Opt(ResultDate),
});
export type WaitingPeriod = z.infer<typeof WaitingPeriod>;

export const HistoryEntry = z.looseObject({
  procedureCode: Opt(Str),
  date: Opt(ResultDate),
  tooth: Opt(Digits),
  surface: Opt(Str),
});
export type HistoryEntry = z.infer<typeof HistoryEntry>;

/**
 * A list that may hold a null where a service had nothing to write. The nulls stay in place, so
 * what is said of an entry names its index as sent; each reader passes them over (entries).
 */
const ListOf = <T extends z.ZodType>(item: T) => z.array(item.nullable());

/** A list's entries that are not null, mapped with their index as sent. */
export function entries<T, R>(list: ReadonlyArray<T | null> | null | undefined, map: (entry: T, index: number) => R): R[] {
  return (list ?? []).flatMap((entry, index) => (entry === null ? [] : [map(entry, index)]));
}

export const BenefitData = z.looseObject({
  maximums: Opt(ListOf(Maximum)),
  deductibles: Opt(ListOf(Deductible)),
  coinsurance: Opt(ListOf(Coinsurance)),
  frequencies: Opt(ListOf(Frequency)),
  ageLimits: Opt(ListOf(AgeLimit)),
  waitingPeriods: Opt(ListOf(WaitingPeriod)),
  history: Opt(ListOf(HistoryEntry)),
});
export type BenefitData = z.infer<typeof BenefitData>;

export const PlanAssignment = z.looseObject({
  office: Opt(z.looseObject({ name: Opt(Str), address: Opt(AddressOut), officeId: Opt(Digits) })),
  provider: Opt(z.looseObject({ firstName: Opt(Str), lastName: Opt(Str), npi: Opt(Digits) })),
});
export type PlanAssignment = z.infer<typeof PlanAssignment>;

export const Plan = z.looseObject({
  name: Opt(Str),
  type: Opt(Str), // PPO | DHMO | Indemnity | Medicaid | Medicare
  groupNumber: Opt(Digits),
  groupName: Opt(Str),
  status: Opt(Str), // Active | Inactive
  effectiveDate: Opt(ResultDate),
  terminationDate: Opt(ResultDate),
  benefitPeriod: Opt(z.looseObject({ start: Opt(ResultDate), end: Opt(ResultDate) })),
  payer: Opt(z.looseObject({ name: Opt(Str), payerId: Opt(Digits), phone: Opt(Digits) })),
  assignment: Opt(PlanAssignment),
});
export type Plan = z.infer<typeof Plan>;

export const VerificationProvider = z.looseObject({
  firstName: Opt(Str),
  middleName: Opt(Str),
  lastName: Opt(Str),
  taxId: Opt(Digits),
  address: Opt(AddressOut),
  /** Participating | Non-Participating */
  participation: Opt(z.looseObject({ status: Opt(Str) })),
});
export type VerificationProvider = z.infer<typeof VerificationProvider>;

export const Context = z.looseObject({ portalId: Opt(Str), dataPoint: Opt(Str), detail: Opt(Str) });
export type Context = z.infer<typeof Context>;

/** Known type: CarryOverDetails. */
export const Disclaimer = z.looseObject({ type: Opt(Str), text: Opt(Str) });
export type Disclaimer = z.infer<typeof Disclaimer>;

const ResultPerson = z.looseObject({
  firstName: Opt(Str),
  lastName: Opt(Str),
  dateOfBirth: Opt(ResultDate),
  memberId: Opt(Digits),
  relationship: Opt(Str),
});

/** result of a Completed or Partial verification. */
export const VerificationResult = z.looseObject({
  patient: Opt(ResultPerson),
  subscriber: Opt(ResultPerson),
  plan: Opt(Plan),
  data: Opt(BenefitData),
  contexts: Opt(ListOf(Context)),
  verificationProvider: Opt(VerificationProvider),
  disclaimers: Opt(ListOf(Disclaimer)),
});
export type VerificationResult = z.infer<typeof VerificationResult>;

/**
 * GET /v2/insurance-verifications/{correlationId}, the synchronous answer and the webhook body.
 * `result` depends on status (a VerificationResult, or problem details when Failed); see outcome.ts.
 */
export const Verification = z.looseObject({
  correlationId: Id,
  externalId: Opt(Str),
  status: Str,
  createdAt: Opt(Timestamp),
  completedAt: Opt(Timestamp),
  result: Opt(z.unknown()),
});
export type Verification = z.infer<typeof Verification>;
