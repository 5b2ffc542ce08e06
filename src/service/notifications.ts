import * as z from 'zod';
import { describeJsonSyntax } from '../verification/json-syntax';

/**
 * Which Appointments an R4 Subscription rest-hook notification is about. R4 servers send either
 * nothing (id-only: "something changed"), the resource itself (full-resource, often PUT to
 * .../Appointment/{id}), or, with the R4 subscriptions backport, a Bundle whose entries carry
 * the resources (full-resource) or only their fullUrl (id-only, STU 1.0), and whose
 * SubscriptionStatus (a Parameters) names each event's focus (id-only from STU 1.1 names it
 * nowhere else). All are read here.
 */
export type NotificationIds = { kind: 'appointments'; appointments: string[] } | { kind: 'heartbeat' } | { kind: 'invalid'; reason: string };

const Resource = z.looseObject({ resourceType: z.string(), id: z.string().optional() });
/** The backport's SubscriptionStatus: parameter notification-event, part focus. */
const SubscriptionStatus = z.looseObject({
  resourceType: z.literal('Parameters'),
  parameter: z.array(z.looseObject({ name: z.string().optional(), part: z.array(z.looseObject({ name: z.string().optional(), valueReference: z.looseObject({ reference: z.string().optional() }).optional() })).optional() })).optional(),
});
const Bundle = z.looseObject({
  resourceType: z.literal('Bundle'),
  entry: z.array(z.looseObject({ fullUrl: z.string().optional(), resource: Resource.optional(), request: z.looseObject({ url: z.string().optional() }).optional() })).optional(),
});

const APPOINTMENT_REF = /(?:^|\/)Appointment\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[^/]+)?$/;

export function subscriptionNotificationIds(body: string, url: string): NotificationIds {
  const fromPath = APPOINTMENT_REF.exec(new URL(url, 'http://x').pathname)?.[1];
  if (body.trim() === '') return fromPath ? { kind: 'appointments', appointments: [fromPath] } : { kind: 'heartbeat' };
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { kind: 'invalid', reason: `body is ${describeJsonSyntax(body)}` };
  }
  const bundle = Bundle.safeParse(json);
  if (bundle.success) {
    const ids = new Set<string>();
    for (const entry of bundle.data.entry ?? []) {
      if (entry.resource?.resourceType === 'Appointment' && entry.resource.id) ids.add(entry.resource.id);
      else for (const ref of [entry.fullUrl, entry.request?.url, ...eventFocuses(entry.resource)]) {
        const id = ref && APPOINTMENT_REF.exec(ref)?.[1];
        if (id) ids.add(id);
      }
    }
    return ids.size > 0 ? { kind: 'appointments', appointments: [...ids] } : { kind: 'heartbeat' };
  }
  const resource = Resource.safeParse(json);
  if (!resource.success) return { kind: 'invalid', reason: 'body is neither a FHIR resource nor a Bundle (resourceType missing)' };
  if (resource.data.resourceType !== 'Appointment') return { kind: 'invalid', reason: `resourceType ${resource.data.resourceType.slice(0, 40)} is not Appointment` };
  const id = resource.data.id ?? fromPath;
  return id ? { kind: 'appointments', appointments: [id] } : { kind: 'invalid', reason: 'Appointment.id missing' };
}

function eventFocuses(resource: unknown): Array<string | undefined> {
  const status = SubscriptionStatus.safeParse(resource);
  if (!status.success) return [];
  return (status.data.parameter ?? [])
    .filter((p) => p.name === 'notification-event')
    .flatMap((p) => (p.part ?? []).filter((part) => part.name === 'focus').map((part) => part.valueReference?.reference));
}
