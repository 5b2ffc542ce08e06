import * as z from 'zod';
import { FHIR_ID } from '../adapters/fhir/in/bundle-index';
import { pathOf } from '../adapters/fhir/in/shapes';
import { describeJsonSyntax } from '../verification/json-syntax';

/**
 * Which Appointments, Patients, Coverages and RelatedPersons an R4 Subscription rest-hook notification
 * is about: an appointment booked or changed, or a patient's details or coverages, or a subscriber's
 * kept as a RelatedPerson, changed under appointments already booked. R4 servers send either nothing (id-only: "something changed"), the resource
 * itself (full-resource, often PUT to .../Coverage/{id}), or, with the R4 subscriptions backport, a
 * Bundle whose entries carry the resources (full-resource) or only their fullUrl (id-only, STU
 * 1.0), and whose SubscriptionStatus (a Parameters) names each event's focus (id-only from STU 1.1
 * names it nowhere else). All are read here.
 */
export type NotificationIds =
  | { kind: 'changes'; changed: Changed; /** Why some of what it names cannot be read (an id R4 does not allow), the rest read. */ unfit: string[] }
  | { kind: 'heartbeat' }
  | { kind: 'invalid'; reason: string }
  | { kind: 'too-many'; reason: string };
export type Changed = Record<ChangedType, string[]>;
export const CHANGED_TYPES = ['Appointment', 'Patient', 'Coverage', 'RelatedPerson'] as const;
type ChangedType = (typeof CHANGED_TYPES)[number];

const Typed = z.looseObject({ resourceType: z.string() });
const Resource = Typed.extend({ id: z.string().optional() });
/** The backport's SubscriptionStatus: parameter notification-event, part focus. */
const SubscriptionStatus = z.looseObject({
  resourceType: z.literal('Parameters'),
  parameter: z.array(z.looseObject({ name: z.string().optional(), part: z.array(z.looseObject({ name: z.string().optional(), valueReference: z.looseObject({ reference: z.string().optional() }).optional() })).optional() })).optional(),
});
const Bundle = z.looseObject({
  resourceType: z.literal('Bundle'),
  entry: z.array(z.looseObject({ fullUrl: z.string().optional(), resource: Resource.optional(), request: z.looseObject({ url: z.string().optional() }).optional() })).optional(),
});

// Any id: changes() refuses one R4 does not allow, where passed over here a path naming it was taken for a heartbeat
// (a trailing slash too, which had the path name nothing).
const CHANGED_REF = /(?:^|\/)(Appointment|Patient|Coverage|RelatedPerson)\/([^/?#]+)(?:\/_history\/[^/?#]+)?\/?(?:[?#].*)?$/;

/** The type and id a reference or URL names, when it is one of the types a change is read for. */
function changedRef(ref: string | undefined): [ChangedType, string] | undefined {
  const match = ref === undefined ? null : CHANGED_REF.exec(ref);
  return match ? [match[1] as ChangedType, match[2] as string] : undefined;
}

/**
 * The most resources one notification is read for. Each is read from the chart inside the HTTP
 * request, one after another, some 10 ms each against a chart on this machine and more across a
 * network: a 1 MiB Bundle names 32,000, minutes of reads whose sender times out and sends it all
 * again. Servers send a notification per change, a backport batch a few; past this many it is refused.
 */
export const MAX_CHANGES = 100;

const isChangedType = (type: string): type is ChangedType => (CHANGED_TYPES as readonly string[]).includes(type);

function changes(refs: Array<[ChangedType, string]>): NotificationIds {
  if (refs.length === 0) return { kind: 'heartbeat' };
  // Read as a URL's path, . and .. would have the chart searched or its base read: the sender's mistake, not the chart's.
  // It is no reason to leave unread what else the notification names, which the sender, told 4xx, would not send again.
  const unfit = new Set<string>();
  // A Set: a 1 MiB Bundle names some 30,000, and looking each up in an array held the event loop over a second.
  const seen: Record<ChangedType, Set<string>> = { Appointment: new Set(), Patient: new Set(), Coverage: new Set(), RelatedPerson: new Set() };
  for (const [type, id] of refs) {
    if (FHIR_ID.test(id)) seen[type].add(id);
    else unfit.add(`${type}.id is not an R4 id (1 to 64 of A-Z, a-z, 0-9, - and ., not . or ..)`);
  }
  const count = CHANGED_TYPES.reduce((sum, type) => sum + seen[type].size, 0);
  if (count > MAX_CHANGES) {
    return { kind: 'too-many', reason: `names ${count} resources, more than the ${MAX_CHANGES} one notification is read for: send them in several, or let the poll (fhirPollIntervalMs) find them` };
  }
  if (count === 0) return { kind: 'invalid', reason: [...unfit].join('; ') };
  return { kind: 'changes', changed: { Appointment: [...seen.Appointment], Patient: [...seen.Patient], Coverage: [...seen.Coverage], RelatedPerson: [...seen.RelatedPerson] }, unfit: [...unfit] };
}

export function subscriptionNotificationIds(body: string, url: string): NotificationIds {
  const fromPath = changedRef(new URL(url, 'http://x').pathname);
  if (body.trim() === '') return changes(fromPath ? [fromPath] : []);
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    // Only the id is taken from a body, and each resource read from the chart: one the path names needs none of it (a
    // Subscription whose channel.payload is application/fhir+xml posts to [endpoint]/[type]/[id] all the same).
    if (fromPath) return changes([fromPath]);
    const xml = body.trimStart().startsWith('<');
    return { kind: 'invalid', reason: xml ? 'body is XML: a notification is read as JSON (channel.payload application/fhir+json), or id-only' : `body is ${describeJsonSyntax(body)}` };
  }
  const typed = Typed.safeParse(json);
  if (!typed.success) return { kind: 'invalid', reason: 'body is neither a FHIR resource nor a Bundle (resourceType missing)' };
  const type = typed.data.resourceType;
  if (type === 'Bundle') {
    const bundle = Bundle.safeParse(json);
    if (!bundle.success) return unreadable('Bundle', bundle.error);
    const refs: Array<[ChangedType, string]> = [];
    for (const entry of bundle.data.entry ?? []) {
      const entryType = entry.resource?.resourceType;
      if (entryType && isChangedType(entryType) && entry.resource?.id) refs.push([entryType, entry.resource.id]);
      else for (const ref of [entry.fullUrl, entry.request?.url, ...eventFocuses(entry.resource)]) {
        const found = changedRef(ref);
        if (found) refs.push(found);
      }
    }
    return changes(refs);
  }
  if (!isChangedType(type)) return { kind: 'invalid', reason: `resourceType ${type.slice(0, 40)} is not Appointment, Patient, Coverage or RelatedPerson` };
  const resource = Resource.safeParse(json);
  if (!resource.success) return unreadable(type, resource.error);
  const id = resource.data.id ?? (fromPath?.[0] === type ? fromPath[1] : undefined);
  return id ? changes([[type, id]]) : { kind: 'invalid', reason: `${type}.id missing` };
}

/** Where it is wrong: told its resourceType is missing or not one read, the sender would look in the wrong place. */
function unreadable(type: string, error: z.ZodError): NotificationIds {
  const issue = error.issues[0];
  return { kind: 'invalid', reason: `${pathOf(type, issue?.path ?? [])}: ${issue?.message ?? 'invalid'}` };
}

function eventFocuses(resource: unknown): Array<string | undefined> {
  const status = SubscriptionStatus.safeParse(resource);
  if (!status.success) return [];
  return (status.data.parameter ?? [])
    .filter((p) => p.name === 'notification-event')
    .flatMap((p) => (p.part ?? []).filter((part) => part.name === 'focus').map((part) => part.valueReference?.reference));
}
