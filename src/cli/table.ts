import { printable, type CliIo } from './io';

export type Column<T> = [header: string, value: (row: T) => string | number | boolean | null | undefined];

/** A plain aligned table for people; `--json` output is for scripts. */
export function formatTable<T>(rows: readonly T[], columns: Column<T>[]): string {
  const cells = rows.map((row) => columns.map(([, value]) => cell(value(row))));
  const widths = columns.map(([header], i) => Math.max(header.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (values: string[]) => values.map((v, i) => v.padEnd(widths[i] ?? 0)).join('  ').trimEnd();
  return [line(columns.map(([h]) => h)), ...cells.map(line)].join('\n');
}

export function printRows<T>(io: CliIo, rows: readonly T[], columns: Column<T>[], asJson: boolean, jsonValue: unknown = rows): void {
  if (asJson) io.stdout.write(`${JSON.stringify(jsonValue, null, 2)}\n`);
  else io.stdout.write(`${rows.length ? formatTable(rows, columns) : '(none)'}\n`);
}

/** One record as `key: value` lines. */
export function printRecord(io: CliIo, record: Record<string, unknown>, asJson: boolean): void {
  if (asJson) {
    io.stdout.write(`${JSON.stringify(record, null, 2)}\n`);
    return;
  }
  const entries = Object.entries(record).filter(([k, v]) => v !== undefined && v !== null && k !== 'sandbox');
  const width = Math.max(...entries.map(([k]) => k.length));
  io.stdout.write(`${entries.map(([k, v]) => `${k.padEnd(width)}  ${cell(v)}`).join('\n')}\n`);
}

function cell(v: unknown): string {
  if (v === undefined || v === null) return '';
  if (Array.isArray(v)) return v.map(cell).join(', ');
  return printable(typeof v === 'object' ? JSON.stringify(v) : String(v));
}
