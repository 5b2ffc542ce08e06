import * as z from 'zod';

/**
 * Where a datum lives, written the way HL7 people write it: `IN1-36` (field), `SCH-11.4`
 * (component), `PID-3.4.2` (subcomponent). Z-segments are ordinary segment names here.
 */
export interface FieldPath {
  segment: string;
  field: number;
  component?: number | undefined;
  subcomponent?: number | undefined;
  /** The path as written in the profile. */
  text: string;
}

const PATH = /^([A-Z][A-Z0-9]{2})-([1-9]\d{0,2})(?:\.([1-9]\d?))?(?:\.([1-9]\d?))?$/;

export function parseFieldPath(text: string): FieldPath | undefined {
  const m = PATH.exec(text);
  if (!m) return undefined;
  const [, segment = '', field = '', component, subcomponent] = m;
  return {
    segment,
    field: Number(field),
    component: component === undefined ? undefined : Number(component),
    subcomponent: subcomponent === undefined ? undefined : Number(subcomponent),
    text,
  };
}

export const FieldPathText = z.string().transform((text, ctx) => {
  const path = parseFieldPath(text);
  if (!path) {
    ctx.addIssue({ code: 'custom', message: `"${text}" is not a field path like IN1-36 or SCH-11.4` });
    return z.NEVER;
  }
  return path;
});

/** A path naming a whole field, for composite data (names, identifiers, persons). */
export const WholeFieldPathText = FieldPathText.refine((p) => p.component === undefined, {
  error: 'must name a whole field (like PID-5), not a component: the data type says which component is which',
});
