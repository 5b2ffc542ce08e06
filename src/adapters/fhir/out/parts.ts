import type { FhirResource, Reference } from 'fhir/r4';

/**
 * What the item builders gather besides items: contained resources (referenced as #id) and
 * values no FHIR element or extension could carry, which end up in unmapped-element extensions.
 */
export class ResponseParts {
  readonly contained: FhirResource[] = [];
  readonly unmapped: Array<{ path: string; value: unknown }> = [];

  contain(resource: FhirResource & { id: string }, display?: string): Reference {
    this.contained.push(resource);
    return { reference: `#${resource.id}`, ...(display ? { display } : {}) };
  }
}
