import * as z from 'zod';

/**
 * Elements of a parsed body that its wire schema does not name. Responses are parsed
 * permissively, so a field the service adds later is kept, and this finds it, so that the
 * writer can carry it in an unmapped-element extension instead of dropping it.
 */
export function unmappedElements(value: unknown, schema: z.ZodType, path: string): Array<{ path: string; value: unknown }> {
  const inner = unwrap(schema);
  if (inner instanceof z.ZodObject && isRecord(value)) {
    const shape = inner.shape as Record<string, z.ZodType>;
    return Object.entries(value).flatMap(([key, v]) => {
      if (v === undefined || v === null) return [];
      const known = shape[key];
      return known ? unmappedElements(v, known, `${path}.${key}`) : [{ path: `${path}.${key}`, value: v }];
    });
  }
  if (inner instanceof z.ZodArray && Array.isArray(value)) {
    return value.flatMap((v, i) => unmappedElements(v, inner.element as z.ZodType, `${path}[${i}]`));
  }
  return [];
}

function unwrap(schema: z.ZodType): z.ZodType {
  let current = schema;
  while (current instanceof z.ZodOptional || current instanceof z.ZodNullable) current = current.unwrap() as z.ZodType;
  return current;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
