import * as z from 'zod';

/**
 * Elements of a parsed body that its wire schema does not name. Responses are parsed
 * permissively, so a field the service adds later is kept, and this finds it, so that the
 * writer can carry it in an unmapped-element extension instead of dropping it.
 */
export function unmappedElements(value: unknown, schema: z.ZodType, path: string): Array<{ path: string; value: unknown }> {
  const found: Array<{ path: string; value: unknown }> = [];
  collect(value, shapeOf(schema), path, found);
  return found;
}

/** What a schema can hold below it, once its optional and nullable wrappers are taken off. */
type Shape = { kind: 'object'; fields: Record<string, z.ZodType> } | { kind: 'array'; element: z.ZodType } | { kind: 'value' };

// Every result walks the same few schemas: each is unwrapped once.
const shapes = new WeakMap<z.ZodType, Shape>();

function shapeOf(schema: z.ZodType): Shape {
  let shape = shapes.get(schema);
  if (shape === undefined) {
    const inner = unwrap(schema);
    shape =
      inner instanceof z.ZodObject
        ? { kind: 'object', fields: inner.shape as Record<string, z.ZodType> }
        : inner instanceof z.ZodArray
          ? { kind: 'array', element: inner.element as z.ZodType }
          : { kind: 'value' };
    shapes.set(schema, shape);
  }
  return shape;
}

/** Walks only where something unnamed can be: a value the schema names as a plain value holds nothing to find. */
function collect(value: unknown, shape: Shape, path: string, found: Array<{ path: string; value: unknown }>): void {
  if (shape.kind === 'object' && isRecord(value)) {
    for (const key in value) {
      const v = value[key];
      if (v === undefined || v === null) continue;
      const known = shape.fields[key];
      if (!known) found.push({ path: `${path}.${key}`, value: v });
      else {
        const inner = shapeOf(known);
        if (inner.kind !== 'value') collect(v, inner, `${path}.${key}`, found);
      }
    }
  } else if (shape.kind === 'array' && Array.isArray(value)) {
    const inner = shapeOf(shape.element);
    if (inner.kind !== 'value') value.forEach((v, i) => collect(v, inner, `${path}[${i}]`, found));
  }
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current = schema;
  while (current instanceof z.ZodOptional || current instanceof z.ZodNullable) current = current.unwrap() as z.ZodType;
  return current;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
