import uPlot from 'uplot';
import { h } from './dom';

/** One line of a chart; null is a gap. */
export interface Series {
  label: string;
  values: (number | null)[];
}

const COLORS = ['#2f6fdb', '#d9822b', '#0a7d33', '#b3261e'];

/** The charts on the page: each holds a canvas and listeners until destroyed. */
const charts: uPlot[] = [];

/** A line chart over `xs` (Unix seconds), registered so that destroyCharts() frees it. */
export function chart(title: string, series: Series[], xs: number[]): HTMLElement {
  const box = h('div', { class: 'chart' }, h('h3', {}, title));
  const plot = new uPlot(
    {
      width: 460,
      height: 180,
      series: [{}, ...series.map((s, i) => ({ label: s.label, stroke: COLORS[i % COLORS.length], width: 2 }))],
      axes: [{}, { size: 60 }],
    },
    [xs, ...series.map((s) => s.values)] as uPlot.AlignedData,
    box,
  );
  charts.push(plot);
  return box;
}

/** Destroys every chart drawn so far (a view change or a redraw). */
export function destroyCharts(): void {
  charts.splice(0).forEach((c) => c.destroy());
}
