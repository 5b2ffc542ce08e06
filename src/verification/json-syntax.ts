/**
 * Where a JSON text goes wrong, as line, column and the kind of problem, without a byte of its
 * content. JSON.parse's own message quotes the text around the error (a patient's name, raw
 * binary) and names no line, so errors about input files are built from this instead.
 */
export interface JsonSyntaxProblem {
  line: number;
  column: number;
  problem: string;
}

class Located extends Error {
  constructor(
    readonly at: number,
    readonly problem: string,
  ) {
    super(problem);
  }
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const HEX4 = /^[0-9a-fA-F]{4}$/;

/** The first syntax problem of a text, or undefined when it is valid JSON. */
export function findJsonSyntaxProblem(text: string): JsonSyntaxProblem | undefined {
  let i = 0;
  const fail = (problem: string, at = i): never => {
    throw new Located(at, problem);
  };
  const space = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i] as string)) i++;
  };
  const ended = (where: string) => i >= text.length && fail(`input ends ${where}`);

  const string = () => {
    const start = i++;
    for (;;) {
      if (i >= text.length) fail('string never closed', start);
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return;
      }
      if (c === 0x5c) {
        const next = text[i + 1];
        if (next !== undefined && '"\\/bfnrt'.includes(next)) i += 2;
        else if (next === 'u' && HEX4.test(text.slice(i + 2, i + 6))) i += 6;
        else fail('invalid escape sequence in a string');
      } else if (c < 0x20) {
        fail('control character in a string (a line break inside a string must be written \\n)');
      } else {
        i++;
      }
    }
  };

  const value = (): void => {
    space();
    ended('where a value was expected');
    const c = text[i] as string;
    if (c === '{' || c === '[') return container(c === '{');
    if (c === '"') return string();
    if (c === '-' || (c >= '0' && c <= '9')) {
      NUMBER.lastIndex = i;
      if (!NUMBER.exec(text)) fail('invalid number');
      i = NUMBER.lastIndex;
      return;
    }
    for (const literal of ['true', 'false', 'null']) {
      if (text.startsWith(literal, i)) {
        i += literal.length;
        return;
      }
    }
    fail(c === "'" ? 'single quotes where JSON needs double quotes' : 'unexpected character where a value was expected');
  };

  const container = (object: boolean): void => {
    const close = object ? '}' : ']';
    const what = object ? 'an object' : 'an array';
    i++;
    space();
    if (text[i] === close) {
      i++;
      return;
    }
    for (;;) {
      if (object) {
        space();
        ended(`inside ${what}`);
        if (text[i] !== '"') fail('expected a property name in double quotes');
        string();
        space();
        ended(`inside ${what}`);
        if (text[i] !== ':') fail("expected ':' after a property name");
        i++;
      }
      value();
      space();
      ended(`inside ${what}`);
      if (text[i] === ',') {
        i++;
        space();
        if (text[i] === close) fail(`trailing comma before '${close}'`);
        continue;
      }
      if (text[i] === close) {
        i++;
        return;
      }
      fail(`expected ',' or '${close}' after ${object ? 'a property value' : 'an element'}`);
    }
  };

  try {
    value();
    space();
    if (i < text.length) fail('more after the end of the JSON value');
    return undefined;
  } catch (err) {
    if (err instanceof Located) return { ...lineAndColumn(text, err.at), problem: err.problem };
    if (err instanceof RangeError) return { line: 1, column: 1, problem: 'nested too deeply to read' };
    throw err;
  }
}

/** `line L, column C: problem`, or a plain `not valid JSON` when the text is valid after all. */
export function describeJsonSyntax(text: string): string {
  const found = findJsonSyntaxProblem(text);
  return found ? `not valid JSON at line ${found.line}, column ${found.column}: ${found.problem}` : 'not valid JSON';
}

function lineAndColumn(text: string, at: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let k = 0; k < at && k < text.length; k++) {
    if (text[k] === '\n') {
      line++;
      lineStart = k + 1;
    }
  }
  return { line, column: at - lineStart + 1 };
}
