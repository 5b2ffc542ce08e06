import * as z from 'zod';
import { FhirInputError } from '../operation-outcome';
import { pathOf, type Reference } from './shapes';

const AnyResource = z.looseObject({ resourceType: z.string().min(1), id: z.string().optional() });
export type AnyResource = z.infer<typeof AnyResource>;

const BundleShape = z.looseObject({
  resourceType: z.literal('Bundle', { error: 'must be "Bundle"' }),
  entry: z.array(z.looseObject({ fullUrl: z.string().optional(), resource: AnyResource.optional() })).optional(),
});

export type Resolved =
  | { kind: 'found'; resource: AnyResource }
  /** A reference that names no resource the bundle holds (or only an identifier); it may still carry a display. */
  | { kind: 'unresolved'; problem: string };

/**
 * The resources of a Bundle by every name a reference may use: fullUrl (urn:uuid or absolute
 * URL), Type/id, and the Type/id tail of an absolute URL. `#id` references resolve inside the
 * referring resource's contained[].
 */
export class BundleIndex {
  private readonly byKey = new Map<string, AnyResource>();
  private readonly fullUrls = new Map<AnyResource, string>();
  private readonly positions = new Map<AnyResource, number>();
  readonly resources: AnyResource[] = [];

  constructor(bundle: unknown) {
    const parsed = BundleShape.safeParse(bundle);
    if (!parsed.success) {
      throw new FhirInputError(
        parsed.error.issues.map((i) => ({ expression: pathOf('Bundle', i.path), diagnostics: i.message, code: 'structure' })),
      );
    }
    for (const [position, entry] of (parsed.data.entry ?? []).entries()) {
      const resource = entry.resource;
      if (!resource) continue;
      this.resources.push(resource);
      this.positions.set(resource, position);
      if (entry.fullUrl) {
        this.fullUrls.set(resource, entry.fullUrl);
        this.byKey.set(entry.fullUrl, resource);
        const tail = relativeTail(entry.fullUrl);
        if (tail) this.byKey.set(tail, resource);
      }
      if (resource.id) this.byKey.set(`${resource.resourceType}/${resource.id}`, resource);
    }
  }

  ofType(type: string): AnyResource[] {
    return this.resources.filter((r) => r.resourceType === type);
  }

  /** `Type/id` as the source knows the resource; its fullUrl when it has no id (a transaction Bundle). */
  relativeReference(resource: AnyResource): string {
    if (resource.id) return `${resource.resourceType}/${resource.id}`;
    return this.fullUrls.get(resource) ?? resource.resourceType;
  }

  /**
   * A FHIRPath naming a resource wherever the Bundle came from (a file, or what was read from a
   * server): `Coverage.where(id='cov-1')`; its entry when it has no id (a transaction Bundle).
   */
  pathOf(resource: AnyResource): string {
    return resource.id && FHIR_ID.test(resource.id) ? `${resource.resourceType}.where(id='${resource.id}')` : this.entryPath(resource);
  }

  /** Where a resource sits in the Bundle, for errors found before it has a place in the result. */
  entryPath(resource: AnyResource): string {
    return `Bundle.entry[${this.positions.get(resource) ?? '?'}].resource`;
  }

  resolve(ref: Reference, types: readonly string[], container?: AnyResource): Resolved {
    const target = ref.reference;
    if (!target) {
      return { kind: 'unresolved', problem: ref.identifier ? 'is a logical reference (identifier only) and the bundle cannot resolve it' : 'has no reference' };
    }
    let found: AnyResource | undefined;
    if (target.startsWith('#')) {
      const contained = z.array(AnyResource).safeParse(container?.contained ?? []);
      found = contained.success ? contained.data.find((r) => r.id === target.slice(1)) : undefined;
    } else {
      found = this.byKey.get(target) ?? this.byKey.get(relativeTail(target) ?? '');
    }
    if (!found) return { kind: 'unresolved', problem: `references ${describe(target)}, which the bundle does not hold` };
    if (!types.includes(found.resourceType)) {
      return { kind: 'unresolved', problem: `must reference ${types.join(' or ')}, not ${found.resourceType}` };
    }
    return { kind: 'found', resource: found };
  }
}

/**
 * R4's id: what a resource is read by, and nothing a URL would take for a path or a query. R4's
 * pattern lets `.` and `..` through, which a URL takes as path steps (`Appointment/.` searches).
 */
export const FHIR_ID = /^(?!\.\.?$)[A-Za-z0-9\-.]{1,64}$/;

/** `Type/id` from `http://host/base/Type/id[/_history/n]`. */
export function relativeTail(url: string): string | undefined {
  const m = /(?:^|\/)([A-Z][A-Za-z]+)\/([A-Za-z0-9\-.]{1,64})(?:\/_history\/[^/]+)?$/.exec(url);
  return m ? `${m[1]}/${m[2]}` : undefined;
}

/** Resource ids are not patient data, but a urn:uuid is noise in a one-line message. */
function describe(target: string): string {
  return target.startsWith('urn:') ? 'an entry' : (relativeTail(target) ?? 'a resource');
}
