import * as z from 'zod';
import { readMappingFile } from '../mapping-files';

const Route = z.strictObject({
  clinicId: z.string().min(1),
  name: z.string().optional(),
  hl7Facilities: z.array(z.string()).default([]),
  hl7Locations: z.array(z.string()).default([]),
  fhirLocations: z.array(z.string()).default([]),
  fhirLocationIdentifiers: z.array(z.strictObject({ system: z.string().optional(), value: z.string() })).default([]),
});

export const ClinicRoutingFile = z.looseObject({
  defaultClinicId: z.string().min(1).optional(),
  routes: z.array(Route),
});
export type ClinicRouting = z.infer<typeof ClinicRoutingFile>;

export function loadClinicRouting(dir?: string): ClinicRouting {
  return readMappingFile('clinics.json', ClinicRoutingFile, dir);
}

/** Where an inbound message says it comes from; any of these may be absent. */
export interface ClinicHints {
  hl7Facility?: string | undefined;
  hl7Location?: string | undefined;
  fhirLocation?: string | undefined;
  fhirLocationIdentifiers?: Array<{ system?: string | undefined; value?: string | undefined }> | undefined;
}

const same = (a: string, b: string) => a.trim().toUpperCase() === b.trim().toUpperCase();

/**
 * The clinicId for a message, or undefined when nothing matches and there is no default.
 * A location is more specific than a facility, so locations are tried first.
 */
export function resolveClinic(routing: ClinicRouting, hints: ClinicHints): string | undefined {
  const { hl7Facility, hl7Location, fhirLocation, fhirLocationIdentifiers = [] } = hints;
  const byLocation = routing.routes.find(
    (r) =>
      (hl7Location !== undefined && r.hl7Locations.some((l) => same(l, hl7Location))) ||
      (fhirLocation !== undefined && r.fhirLocations.some((l) => l === fhirLocation)) ||
      fhirLocationIdentifiers.some((id) =>
        r.fhirLocationIdentifiers.some((known) => id.value === known.value && (known.system === undefined || known.system === id.system)),
      ),
  );
  if (byLocation) return byLocation.clinicId;
  const byFacility = hl7Facility === undefined ? undefined : routing.routes.find((r) => r.hl7Facilities.some((f) => same(f, hl7Facility)));
  return byFacility?.clinicId ?? routing.defaultClinicId;
}
