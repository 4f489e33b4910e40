// Every piece of text in every plotly chart on the page: which overlap text of another kind, which reach outside
// their chart (cut off), and which axes label ticks closer than a label's height (crowded: labels piled up, or
// heatmap cell numbers wider than their cells). Returns {overlaps: [...], cut: [...], crowded: [...], charts: n}.
() => {
  const groups = {
    title: ".gtitle", xtick: ".xtick text", ytick: ".ytick text", xtitle: ".g-xtitle text",
    ytitle: ".g-ytitle text", annotation: ".annotation-text", colorbar: ".colorbar text", cbfill: ".colorbar .cbfill",
  };
  const overlaps = [], cut = [], crowded = [];
  const GAP = 11;  // pixels between neighbouring tick labels' anchors: about a 12 px label's height
  const charts = [...document.querySelectorAll(".js-plotly-plot")];
  for (const gd of charts) {
    const name = (gd.closest("[class*='st-key-']") || gd).className.match(/st-key-(\S+)/)?.[1] || "chart";
    const frame = gd.querySelector(".main-svg").getBoundingClientRect();
    const boxes = [];
    for (const [kind, sel] of Object.entries(groups)) {
      for (const el of gd.querySelectorAll(sel)) {
        const r = el.getBoundingClientRect();
        if (r.width < 1 || r.height < 1 || (kind !== "cbfill" && !el.textContent.trim())) continue;
        boxes.push({kind, text: el.textContent.slice(0, 40), r});
        if (r.left < frame.left - 1 || r.right > frame.right + 1 || r.top < frame.top - 1 || r.bottom > frame.bottom + 1)
          cut.push(`${name}: ${kind} "${el.textContent.slice(0, 40)}"`);
      }
    }
    for (const [axis, sel] of [["x", ".xtick text"], ["y", ".ytick text"]]) {
      const ax = gd._fullLayout[axis + "axis"];
      if (!ax || !ax._vals) continue;
      const drawn = [...gd.querySelectorAll(sel)].filter(el => el.textContent.trim()).length;
      // Where plotly anchors each drawn label (a slanted label's box says little about how close it is to the next).
      const at = ax._vals.filter(v => v.text !== "").map(v => ax.l2p(v.x)).sort((a, b) => a - b).slice(0, drawn);
      const gaps = at.slice(1).map((v, i) => v - at[i]);
      const all = ax.type === "category" ? ax._categories.length : 0;
      if (drawn < all) crowded.push(`${name}: ${axis} labels ${drawn} of ${all} drawn`);
      if (gaps.length && Math.min(...gaps) < GAP) crowded.push(`${name}: ${axis} labels ${Math.min(...gaps).toFixed(1)} px apart`);
    }
    const cells = gd.querySelectorAll(".heatmap-label");
    for (const ax of cells.length ? [gd._fullLayout.xaxis] : []) {
      const width = ax._length / Math.max(1, (ax.range[1] - ax.range[0]));
      const widest = Math.max(...[...cells].map(el => el.getBoundingClientRect().width));
      const smallest = Math.min(...[...cells].map(el => parseFloat(getComputedStyle(el).fontSize)));
      if (smallest < 10) crowded.push(`${name}: cell text shrunk to ${smallest.toFixed(1)} px to fit its cells`);
      if (widest > 0.8 * width) crowded.push  // a number needs a gap either side to read as its cell's(`${name}: cell text ${widest.toFixed(0)} px in ${width.toFixed(0)} px cells`);
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.kind === b.kind) continue;
      const dx = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const dy = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (dx > 1 && dy > 1) overlaps.push(`${name}: ${a.kind} "${a.text}" on ${b.kind} "${b.text}"`);
    }
  }
  return {overlaps, cut, crowded, charts: charts.length};
}
