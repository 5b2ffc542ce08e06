import * as z from 'zod';
import { readMappingFile } from '../mapping-files';
import { isTimeZone } from './local-date';

const TimeZone = z.string().refine(isTimeZone, { error: 'must be an IANA time zone, such as America/Los_Angeles' });

const Route = z.strictObject({
  // Trimmed here, as EligibilityCheck trims it: the HL7 adapter builds checks without parsing them again.
  clinicId: z.string().trim().min(1),
  name: z.string().optional(),
  hl7Facilities: z.array(z.string()).default([]),
  hl7Locations: z.array(z.string()).default([]),
  fhirLocations: z.array(z.string()).default([]),
  fhirLocationIdentifiers: z.array(z.strictObject({ system: z.string().optional(), value: z.string() })).default([]),
  /** Where the clinic is, when it is not where the file's timeZone says. */
  timeZone: TimeZone.optional(),
});
type Route = z.infer<typeof Route>;

export const ClinicRoutingFile = z
  .looseObject({
    defaultClinicId: z.string().trim().min(1).optional(),
    /** The practice's time zone: an appointment time written as an instant (FHIR's, often in UTC) is dated there. */
    timeZone: TimeZone.optional(),
    routes: z.array(Route),
  })
  .superRefine((file, ctx) => {
    // A clinic is in one place, whichever of its routes names it.
    file.routes.forEach((route, i) => {
      const other = route.timeZone === undefined ? undefined : zoneOf(file.routes, route.clinicId);
      if (other !== undefined && other !== route.timeZone) ctx.addIssue({ code: 'custom', path: ['routes', i, 'timeZone'], message: `is not ${other}, which another route of ${route.clinicId} names` });
    });
  });
export type ClinicRouting = z.infer<typeof ClinicRoutingFile>;

export function loadClinicRouting(dir?: string): ClinicRouting {
  return readMappingFile('clinics.json', ClinicRoutingFile, dir);
}

/** Where an inbound message says it comes from; any of these may be absent. */
export interface ClinicHints {
  /** Every facility the message names (MSH-4.1, AIL-3.4): any of them may be the clinic's. */
  hl7Facilities?: readonly string[] | undefined;
  hl7Location?: string | undefined;
  fhirLocation?: string | undefined;
  fhirLocationIdentifiers?: Array<{ system?: string | undefined; value?: string | undefined }> | undefined;
}

/** Equal but for case and surrounding spaces: how codes and names written by PMSs compare. */
export const sameText = (a: string, b: string) => a.trim().toUpperCase() === b.trim().toUpperCase();

/**
 * The clinicId for a message, or undefined when nothing matches and there is no default. A FHIR
 * Location names one clinic. An HL7 location (AIL-3.1) is often an operatory name that every
 * clinic has (OP1), so it counts first together with the facility; then the facility alone; then
 * the location alone, for senders whose MSH-4 names no clinic, but only a location one clinic
 * lists: OP1 of a clinic not in the file would otherwise be verified as the first clinic listing
 * OP1, under its NPI and portal credentials. Routes are tried in file order.
 */
export function resolveClinic(routing: ClinicRouting, hints: ClinicHints): string | undefined {
  const { hl7Facilities = [], hl7Location, fhirLocation, fhirLocationIdentifiers = [] } = hints;
  const atFhirLocation = (r: Route) =>
    (fhirLocation !== undefined && r.fhirLocations.some((l) => l === fhirLocation)) ||
    fhirLocationIdentifiers.some((id) => r.fhirLocationIdentifiers.some((known) => id.value === known.value && (known.system === undefined || known.system === id.system)));
  const atFacility = (r: Route) => hl7Facilities.some((f) => r.hl7Facilities.some((known) => sameText(known, f)));
  const atLocation = (r: Route) => hl7Location !== undefined && r.hl7Locations.some((l) => sameText(l, hl7Location));
  const route =
    routing.routes.find(atFhirLocation) ??
    routing.routes.find((r) => atLocation(r) && atFacility(r)) ??
    routing.routes.find(atFacility) ??
    onlyClinic(routing.routes.filter(atLocation));
  return route?.clinicId ?? routing.defaultClinicId;
}

/** The route when every one given is the same clinic's; none when they name several (or none). */
function onlyClinic(routes: Route[]): Route | undefined {
  const [first] = routes;
  return first !== undefined && routes.every((r) => r.clinicId === first.clinicId) ? first : undefined;
}

/**
 * The time zone a clinic's appointments are dated in: the one its routes name (any of them: a clinic
 * listed once for its HL7 facility and once for its FHIR Location may name it on either), else the
 * file's; undefined when neither says.
 */
export function clinicTimeZone(routing: ClinicRouting, clinicId: string): string | undefined {
  return zoneOf(routing.routes, clinicId) ?? routing.timeZone;
}

/**
 * The time zone a sender's clock keeps, by its facility (MSH-4.1): that of the clinic the facility
 * is routed to, else the file's. An MSH-7 written without an offset is read in it.
 */
export function senderTimeZone(routing: ClinicRouting, facility: string): string | undefined {
  const clinicId = facility === '' ? undefined : resolveClinic(routing, { hl7Facilities: [facility] });
  return (clinicId !== undefined ? clinicTimeZone(routing, clinicId) : undefined) ?? routing.timeZone;
}

function zoneOf(routes: readonly Route[], clinicId: string): string | undefined {
  return routes.find((r) => r.clinicId === clinicId && r.timeZone !== undefined)?.timeZone;
}
