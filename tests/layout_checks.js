// Every piece of text in every plotly chart on the page: which overlap text of another kind, and which
// reach outside their chart (cut off). Returns {overlaps: [...], cut: [...], charts: n}.
() => {
  const groups = {
    title: ".gtitle", xtick: ".xtick text", ytick: ".ytick text", xtitle: ".g-xtitle text",
    ytitle: ".g-ytitle text", annotation: ".annotation-text", colorbar: ".colorbar text",
  };
  const overlaps = [], cut = [];
  const charts = [...document.querySelectorAll(".js-plotly-plot")];
  for (const gd of charts) {
    const name = (gd.closest("[class*='st-key-']") || gd).className.match(/st-key-(\S+)/)?.[1] || "chart";
    const frame = gd.querySelector(".main-svg").getBoundingClientRect();
    const boxes = [];
    for (const [kind, sel] of Object.entries(groups)) {
      for (const el of gd.querySelectorAll(sel)) {
        const r = el.getBoundingClientRect();
        if (r.width < 1 || r.height < 1 || !el.textContent.trim()) continue;
        boxes.push({kind, text: el.textContent.slice(0, 40), r});
        if (r.left < frame.left - 1 || r.right > frame.right + 1 || r.top < frame.top - 1 || r.bottom > frame.bottom + 1)
          cut.push(`${name}: ${kind} "${el.textContent.slice(0, 40)}"`);
      }
    }
    for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.kind === b.kind) continue;
      const dx = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const dy = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (dx > 1 && dy > 1) overlaps.push(`${name}: ${a.kind} "${a.text}" on ${b.kind} "${b.text}"`);
    }
  }
  return {overlaps, cut, charts: charts.length};
}
