// Stacked bars per day and model, drawn by uPlot (loaded only with the usage page). Each series
// is drawn at its running sum so the bars stack; the legend shows each model's own value on hover.
import uPlot from 'uplot';

const COLOURS = ['#1a5fb4', '#c64600', '#2a7d2e', '#8a3ab9', '#a51d2d', '#0b7285', '#6b5900', '#4a4a4a'];

export interface ChartInput {
  days: string[];
  models: string[];
  /** values[m][d]: model m on day d. */
  values: number[][];
  /** A value in the legend. */
  format: (v: number) => string;
  /** The labels of the value axis (default: each tick through `format`). */
  formatTicks?: (ticks: number[]) => string[];
}

export function drawStackedChart(target: HTMLElement, input: ChartInput, width: number): uPlot {
  const xs = input.days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
  const sums: number[][] = [];
  input.values.forEach((row, m) => sums.push(row.map((v, d) => v + (m > 0 ? sums[m - 1]![d]! : 0))));
  // A model's empty day draws nothing (a zero-height bar would still show its outline).
  const stacked = sums.map((row, m) => row.map((v, d) => (input.values[m]![d] === 0 ? null : v)));
  const bars = uPlot.paths.bars!({ size: [0.7, 48], align: 0 });
  const series: uPlot.Series[] = [
    { label: 'Day (UTC)', value: (_u, v) => (v == null ? '—' : new Date(v * 1000).toISOString().slice(0, 10)) },
  ];
  input.models.forEach((model, m) =>
    series.push({
      label: model,
      stroke: COLOURS[m % COLOURS.length]!,
      fill: COLOURS[m % COLOURS.length]!,
      paths: bars,
      points: { show: false },
      value: (_u, _v, _s, i) => (i == null ? '—' : input.format(input.values[m]![i]!)),
    }),
  );
  // Drawn from the top of the stack down, so each lower bar paints over the upper ones' lower part.
  const order = series.slice(1).reverse();
  const data = [xs, ...stacked.slice().reverse()] as uPlot.AlignedData;
  return new uPlot(
    {
      width,
      height: 260,
      series: [series[0]!, ...order],
      scales: {
        x: { time: true, range: (_u, min, max) => [min - 43_200, max + 43_200] },
        y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] },
      },
      axes: [
        { space: 60, values: (_u, ticks) => ticks.map((t) => new Date(t * 1000).toISOString().slice(5, 10)) },
        { size: 70, values: (_u, ticks) => input.formatTicks?.(ticks) ?? ticks.map((t) => input.format(t)) },
      ],
      cursor: { drag: { x: false, y: false } },
      legend: { live: true },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'),
    },
    data,
    target,
  );
}
