import { readdirSync } from 'node:fs';
import * as path from 'node:path';
import * as z from 'zod';
import { ConfigError } from '../../config-error';
import { mappingsDir, readMappingFile } from '../../mapping-files';
import { loadCodeTables, type CodeTables } from './code-tables';
import { FieldPathText, WholeFieldPathText } from './field-path';
import { messageTypeOf, type MessageHeader } from './message-header';

/**
 * A profile says where each datum lives in a sender's messages (mappings/hl7/default.json), so a
 * PMS dialect is a data change: a file in mappings/hl7/dialects/ that replaces single entries for
 * the sending applications (MSH-3) it names.
 */

const Paths = z.array(FieldPathText);
const RequiredPaths = Paths.min(1, { error: 'needs at least one field path' });
const WholeFields = z.array(WholeFieldPathText).min(1, { error: 'needs at least one field path' });

export const EventAction = z.enum(['book', 'reschedule', 'cancel', 'record', 'merge', 'ignore']);
export type EventAction = z.infer<typeof EventAction>;

/** Values as PMSs' codes and names compare (sameText): trimmed and in upper case, looked up without a scan. */
const comparable = (values: readonly string[]): ReadonlySet<string> => new Set(values.map((v) => v.trim().toUpperCase()));

/** Fields holding a value that means something (self-pay, a visit that will not happen): any path with one of its values. */
const ValuesAt = z.array(z.strictObject({ path: FieldPathText, values: z.array(z.string().min(1)).min(1).transform(comparable) }));
export type ValuesAt = z.infer<typeof ValuesAt>;

const EventKey = z.string().regex(/^[A-Z0-9]{3}\^[A-Z0-9]{3}$/, { error: 'must be like SIU^S12' });

const Sections = {
  /** Message type^event → what the message does; events not listed are rejected unless acknowledged only. */
  events: z.record(EventKey, EventAction),
  /** Message types whose other events are acknowledged and ignored (e.g. SIU^S18, ADT^A03). */
  acknowledgeOnly: z.array(z.string().regex(/^[A-Z0-9]{3}$/, { error: 'must be a message type like SIU' })),
  /**
   * MSH-11.1 values (table 0103) whose messages are used: P (production) in a live deployment, so
   * a training or debugging feed pointed here by mistake verifies no one against live payers.
   */
  processingIds: z.array(z.string().regex(/^[PTD]$/, { error: 'must be P, T or D (HL7 table 0103)' })).min(1, { error: 'name at least one processing id' }),
  patient: z.strictObject({
    identifiers: WholeFields,
    name: WholeFields,
    birthDate: RequiredPaths,
    gender: Paths,
  }),
  insurance: z.strictObject({
    payerId: Paths,
    payerName: Paths,
    planName: Paths,
    groupNumber: Paths,
    groupName: Paths,
    /** Coordination-of-benefits order: 1 primary, 2 secondary, 3 tertiary; else the IN1's position. */
    order: Paths,
    subscriberName: WholeFields,
    subscriberBirthDate: Paths,
    subscriberRelationship: z
      .array(z.strictObject({ path: FieldPathText, tables: z.array(z.string().min(1)).min(1) }))
      .min(1, { error: 'needs at least one field path' }),
    subscriberMemberId: RequiredPaths,
    patientMemberId: Paths,
    /** When the plan begins and ends (IN1-12, IN1-13): a plan not in force on the day of the visit makes no check. */
    planEffective: Paths,
    planExpiration: Paths,
    /** An insurance group matching any of these is the patient paying for themselves: no check. */
    selfPay: ValuesAt,
  }),
  appointment: z.strictObject({
    id: RequiredPaths,
    start: RequiredPaths,
    /**
     * Persons, read as XCN: component 1 the id (an NPI when it is one), 2 family name, 3 given
     * name. AIG-3 is a CWE, but the feeds that name the dentist there write it the same way.
     */
    provider: z.array(WholeFieldPathText),
    /**
     * Where each person's role is (AIP-4, AIG-4), read in the person's own segment: the first of
     * these paths for that segment whose value mappings/hl7/provider-role.json lists says who they are.
     */
    providerRole: Paths,
    /**
     * A booking or move holding one of these says the visit will not happen: it is a cancellation.
     * Some PMSs send an S12 or S14 whose filler status (SCH-25, HL7 table 0278) is Cancelled,
     * Deleted, Noshow or Dc rather than an S15.
     */
    cancelledWhen: ValuesAt,
  }),
  /**
   * A merge (ADT^A40, A34) or a change of identifier (A47): each patient group (a PID and the
   * segments after it up to the next PID) names the surviving patient in the patient paths and
   * the prior one, merged into it, here. MRG-1 is the prior identifier list (CX, as PID-3), MRG-4
   * the prior patient id of 2.3 and 2.4 senders (as PID-2).
   */
  merge: z.strictObject({
    priorIdentifiers: WholeFields,
  }),
  /**
   * Hints for mappings/clinics.json: the facility (MSH-4, and the location's own facility AIL-3.4;
   * every path with a value counts) and the appointment's location (AIL-3).
   */
  clinic: z.strictObject({
    facility: Paths,
    location: Paths,
  }),
};

const ProfileFile = z.strictObject({
  $comment: z.string().optional(),
  name: z.string().min(1),
  description: z.string().optional(),
  ...Sections,
});

const DialectFile = z.strictObject({
  $comment: z.string().optional(),
  name: z.string().min(1),
  description: z.string().min(1, { error: 'say which PMS this is and what differs' }),
  /** MSH-3 (first component) values this dialect applies to, matched without regard to case. */
  sendingApplications: z.array(z.string().min(1)).min(1, { error: 'name at least one sending application' }),
  events: Sections.events.optional(),
  acknowledgeOnly: Sections.acknowledgeOnly.optional(),
  processingIds: Sections.processingIds.optional(),
  patient: Sections.patient.partial().optional(),
  insurance: Sections.insurance.partial().optional(),
  appointment: Sections.appointment.partial().optional(),
  merge: Sections.merge.partial().optional(),
  clinic: Sections.clinic.partial().optional(),
});

export type Hl7Profile = Omit<z.infer<typeof ProfileFile>, '$comment'> & { sendingApplications: string[] };

export interface Hl7Mappings {
  defaultProfile: Hl7Profile;
  dialects: Hl7Profile[];
  codeTables: CodeTables;
}

const DIALECTS = 'hl7/dialects';

/** Reads the default profile, every dialect and the code tables; a bad file fails here, naming it. */
export function loadHl7Mappings(dir = mappingsDir()): Hl7Mappings {
  const codeTables = loadCodeTables(dir);
  const base = readMappingFile('hl7/default.json', ProfileFile, dir);
  const defaultProfile: Hl7Profile = { ...withoutComment(base), sendingApplications: [] };
  const dialects = dialectFiles(dir).map((file) => {
    const d = readMappingFile(`${DIALECTS}/${file}`, DialectFile, dir);
    return {
      name: d.name,
      description: d.description,
      sendingApplications: d.sendingApplications,
      events: d.events ?? base.events,
      acknowledgeOnly: d.acknowledgeOnly ?? base.acknowledgeOnly,
      processingIds: d.processingIds ?? base.processingIds,
      patient: { ...base.patient, ...d.patient },
      insurance: { ...base.insurance, ...d.insurance },
      appointment: { ...base.appointment, ...d.appointment },
      merge: { ...base.merge, ...d.merge },
      clinic: { ...base.clinic, ...d.clinic },
    };
  });
  const claimed = new Map<string, string>();
  for (const profile of [defaultProfile, ...dialects]) {
    for (const { tables } of profile.insurance.subscriberRelationship) {
      const unknown = tables.find((t) => !codeTables.relationshipTables.has(t));
      if (unknown) throw new ConfigError(`mappings/hl7 profile ${profile.name}: relationship table ${unknown} is not in mappings/hl7/relationship.json`);
    }
    for (const app of profile.sendingApplications) {
      const other = claimed.get(app.toUpperCase());
      if (other) throw new ConfigError(`mappings/${DIALECTS}: sending application ${app} is claimed by both ${other} and ${profile.name}`);
      claimed.set(app.toUpperCase(), profile.name);
    }
  }
  return { defaultProfile, dialects, codeTables };
}

/** What a profile does with a message of this header's type: its event's action, ignore for a code it only acknowledges, undefined for one it does not take. */
export function eventActionFor(profile: Hl7Profile, header: MessageHeader): EventAction | undefined {
  return profile.events[messageTypeOf(header)] ?? (profile.acknowledgeOnly.includes(header.messageCode.toUpperCase()) ? 'ignore' : undefined);
}

/** The dialect naming this sending application (MSH-3), else the default profile. */
export function profileFor(mappings: Hl7Mappings, sendingApplication: string): Hl7Profile {
  const app = sendingApplication.trim().toUpperCase();
  return mappings.dialects.find((d) => d.sendingApplications.some((a) => a.toUpperCase() === app)) ?? mappings.defaultProfile;
}

/**
 * The dialect files, none where the folder is not there. One that cannot be listed (its permissions
 * not the service user's) is refused: read as none, each PMS a dialect names would be read by the
 * default profile, its member ids looked for where it does not write them, every booking refused.
 */
function dialectFiles(dir: string): string[] {
  const folder = path.join(dir, DIALECTS);
  try {
    return readdirSync(folder)
      .filter((f) => f.endsWith('.json'))
      .sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new ConfigError(`mappings/${DIALECTS}: cannot be listed (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
}

function withoutComment<T extends { $comment?: string | undefined }>(file: T): Omit<T, '$comment'> {
  const { $comment: _comment, ...rest } = file;
  return rest;
}
