import { describeJsonSyntax, findJsonSyntaxProblem } from '../../src/verification/json-syntax';

describe('findJsonSyntaxProblem', () => {
  it('finds nothing wrong with valid JSON, of any shape', () => {
    for (const text of ['{}', '[]', ' {"a": [1, -2.5e3, true, false, null, "x\\"\\u00e9"]}\n', '"s"', '0']) {
      expect(findJsonSyntaxProblem(text)).toBeUndefined();
    }
  });

  it.each([
    ['{"family":Whitaker,"given":"Ellen"}', 1, 11, 'unexpected character where a value was expected'],
    ['{\n  "a": 1\n  "b": 2\n}', 3, 3, "expected ',' or '}' after a property value"],
    ['{"a": [1, 2,]}', 1, 13, "trailing comma before ']'"],
    ["{'a': 1}", 1, 2, 'expected a property name in double quotes'],
    ['{"a": "Ellen', 1, 7, 'string never closed'],
    ['{"a": "line\nbreak"}', 1, 12, 'control character in a string (a line break inside a string must be written \\n)'],
    ['{"a": 1', 1, 8, 'input ends inside an object'],
    ['', 1, 1, 'input ends where a value was expected'],
    ['{"a": 01}', 1, 8, "expected ',' or '}' after a property value"],
    ['{"a": -}', 1, 7, 'invalid number'],
    ['{"a": "\\x"}', 1, 8, 'invalid escape sequence in a string'],
    ['{} {}', 1, 4, 'more after the end of the JSON value'],
  ])('%j: line %i, column %i, %s', (text, line, column, problem) => {
    expect(findJsonSyntaxProblem(text)).toEqual({ line, column, problem });
    expect(() => JSON.parse(text)).toThrow();
  });

  it('describes binary input by position and problem, with none of its bytes', () => {
    const binary = Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0xff, 0xfe, 0x00, 0x01]).toString('utf8');
    const text = describeJsonSyntax(binary);
    expect(text).toBe('not valid JSON at line 1, column 6: unexpected character where a value was expected');
    expect(text).toMatch(/^[\x20-\x7e]+$/);
  });

  it('reports deep nesting without overflowing', () => {
    expect(findJsonSyntaxProblem('['.repeat(200_000))).toEqual({ line: 1, column: 1, problem: 'nested too deeply to read' });
  });
});
