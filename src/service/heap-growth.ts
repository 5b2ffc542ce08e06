import { setFlagsFromString } from 'node:v8';

/** How far past what is live V8 lets the old generation grow before it collects it, in percent. */
export const SERVE_HEAP_GROWING_PERCENT = 25;

/**
 * Keeps this process's heap near what is live. By default V8 lets the old generation grow to up
 * to four times what survived its last full collection. In serve what is promoted is mostly the
 * checks in flight, dead a second later: a 1,000-check morning batch grew the old generation from
 * 57 to 185 MB with about 70 MB live (RSS 357 MB; 476 MB over 10,000 checks). Growing by a quarter
 * costs a few more full collections, most of their marking on V8's own threads, and kept RSS near
 * 250 MB. V8 reads the factor each time it sets the next limit, so it can be set
 * while running. An operator's own `node --heap-growing-percent=…` wins (Node refuses it in NODE_OPTIONS).
 */
export function keepHeapNearLive(percent = SERVE_HEAP_GROWING_PERCENT): boolean {
  if (v8FlagGiven('heap-growing-percent', process.execArgv)) return false;
  setFlagsFromString(`--heap-growing-percent=${percent}`);
  return true;
}

/**
 * What to tell an operator running serve on Node 24 or later without a young-generation limit:
 * its V8 lets the young generation grow to 128 MB (Node 20 and 22 stop at 32 MB), which took a
 * morning batch's peak RSS from about 240 MB to 330 to 360. Unlike the growing factor, the limit
 * is read only as V8 starts: the command line or NODE_OPTIONS must carry it.
 */
export function youngGenerationAdvice(version = process.versions.node, execArgv = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ''): string | undefined {
  if (Number(version.split('.')[0]) < 24) return undefined;
  return v8FlagGiven('max-semi-space-size', [...execArgv, ...nodeOptions.split(/\s+/)]) ? undefined : 'V8 on this Node grows the young generation to 128 MB: start serve with NODE_OPTIONS=--max-semi-space-size=16 to keep its memory near 250 MB';
}

/** Whether a V8 flag is among the arguments, spelled with dashes or underscores as V8 takes either. */
function v8FlagGiven(flag: string, args: readonly string[]): boolean {
  const pattern = new RegExp(`^--${flag.replace(/-/g, '[-_]')}\\b`);
  return args.some((arg) => pattern.test(arg));
}
