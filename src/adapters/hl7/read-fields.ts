import type { FieldPath } from './field-path';
import type { ValuesAt } from './profile';
import type { Hl7Segment } from './hl7-message';
import type { Hl7Problem } from './hl7-errors';

/**
 * Reading a profile entry: an ordered list of paths, the first one with a value wins. A scope is
 * the segments a path may be read from (the whole message, or one insurance group).
 */
export interface Found {
  value: string;
  path: FieldPath;
  segment: Hl7Segment;
}

export function firstValue(scope: readonly Hl7Segment[], paths: readonly FieldPath[]): Found | undefined {
  for (const path of paths) {
    for (const segment of scope) {
      if (segment.name !== path.segment) continue;
      const value = valueAt(segment, path);
      if (value) return { value, path, segment };
    }
  }
  return undefined;
}

/**
 * Whether the sender deletes the datum the paths name: none has a value and one holds HL7's null
 * (""). An empty field is no such statement: it leaves what the receiver holds as it was.
 */
export function nulledAt(scope: readonly Hl7Segment[], paths: readonly FieldPath[]): boolean {
  if (firstValue(scope, paths)) return false;
  return paths.some((path) => scope.some((segment) => segment.name === path.segment && segment.isNull(path.field, path.component, path.subcomponent)));
}

/** The datum at a path, from the first repetition that has it: a sender may leave the first empty (IN1-3 as ~CDCA1). */
function valueAt(segment: Hl7Segment, path: FieldPath): string {
  const { field, component = 1, subcomponent = 1 } = path;
  const first = segment.value(field, component, subcomponent).trim();
  if (first || !segment.repeats(field)) return first;
  for (let rep = 1; rep < segment.repetitions(field); rep++) {
    const later = segment.value(field, component, subcomponent, rep).trim();
    if (later) return later;
  }
  return '';
}

/**
 * A message's groups that begin with a segment: each such segment and those after it up to the
 * next (an IN1 and its IN2; a merge's PID and its MRG). What comes before the first is in none.
 */
export function groupsOf(segments: readonly Hl7Segment[], first: string): Hl7Segment[][] {
  const groups: Hl7Segment[][] = [];
  for (const segment of segments) {
    if (segment.name === first) groups.push([segment]);
    else groups[groups.length - 1]?.push(segment);
  }
  return groups;
}

/** Every occurrence of a whole field that has something in it, in path order (for composite data). */
export function fieldsWithValues(scope: readonly Hl7Segment[], paths: readonly FieldPath[]): Array<{ segment: Hl7Segment; path: FieldPath }> {
  const found: Array<{ segment: Hl7Segment; path: FieldPath }> = [];
  for (const path of paths) {
    for (const segment of scope) {
      if (segment.name === path.segment && segment.hasValue(path.field)) found.push({ segment, path });
    }
  }
  return found;
}

export type Where = Pick<Hl7Problem, 'segment' | 'sequence' | 'field' | 'component'>;

export function whereFound(found: { segment: Hl7Segment; path: FieldPath }): Where {
  return { segment: found.segment.name, sequence: found.segment.sequence, field: found.path.field, component: found.path.component };
}

/**
 * Where to say a missing datum should have been: the first path whose segment the message has
 * (a v2.3 sender is told SCH-11.4, not TQ1-7), else the first path.
 */
export function whereMissing(scope: readonly Hl7Segment[], paths: readonly FieldPath[]): Where {
  for (const path of paths) {
    const segment = scope.find((s) => s.name === path.segment);
    if (segment) return { segment: segment.name, sequence: segment.sequence, field: path.field, component: path.component };
  }
  const path = paths[0];
  return path ? { segment: path.segment, sequence: 1, field: path.field, component: path.component } : { segment: 'MSH', sequence: 1 };
}

/** Whether any of the paths holds one of its values (first value found per path, compared trimmed and in upper case). */
export function holdsAny(scope: readonly Hl7Segment[], entries: ValuesAt): boolean {
  return entries.some(({ path, values }) => {
    const found = firstValue(scope, [path]);
    // found.value is trimmed already; the values were made comparable when the profile was read.
    return found !== undefined && values.has(found.value.toUpperCase());
  });
}
