// The few formatting functions the generated rules and dashboards
// (generated.libsonnet) apply to $._config, written to give the same text as
// the Python generator's own (gpu_exporter/alerting/templates.py: duration,
// prose_duration; thresholds.py: the table's prose; Python's %g and %.15g).
{
  // A duration in seconds, from a number or a Prometheus duration string
  // ("90s", "1h30m", "500ms", "1d"), as alerts/config.yaml takes them.
  seconds(d)::
    if std.isNumber(d) then d
    else
      local units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
      local chars = std.stringChars(d);
      local isDigit(c) = std.member('0123456789.', c);
      local step(acc, c) =
        if isDigit(c) then
          if acc.unit != '' then acc { total: acc.total + std.parseJson(acc.num) * units[acc.unit], num: c, unit: '' }
          else acc { num: acc.num + c }
        else acc { unit: acc.unit + c };
      local end = std.foldl(step, chars, { total: 0, num: '', unit: '' });
      assert end.num != '' && std.objectHas(units, end.unit) : 'not a duration: ' + d;
      end.total + std.parseJson(end.num) * units[end.unit],

  // Python's format(v, 'g') and format(v, '.15g').
  g(v):: std.format('%g', v),
  g15(v):: std.format('%.15g', v),
  // Python's format(v, '.0%').
  pct0(v):: std.format('%.0f', v * 100) + '%',

  // templates.duration: 3600 -> 1h, 90 -> 1m30s, 0.5 -> 500ms.
  promDuration(d)::
    local s = self.seconds(d);
    local ms0 = std.round(s * 1000);
    local parts = std.foldl(
      function(acc, u)
        if acc.ms >= u[1] then { ms: acc.ms % u[1], out: acc.out + std.toString(std.floor(acc.ms / u[1])) + u[0] }
        else acc,
      [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]],
      { ms: ms0, out: '' }
    );
    if s <= 0 then '0s' else parts.out,

  // templates.prose_duration: 600 -> "10 minutes", 3600 -> "1 hour".
  proseDuration(d)::
    local s = self.seconds(d);
    local units = [u for u in [['day', 86400], ['hour', 3600], ['minute', 60], ['second', 1]]
                   if s >= u[1] && std.mod(s, u[1]) == 0];
    if std.length(units) == 0 then self.promDuration(s)
    else
      local n = std.floor(s / units[0][1]);
      std.toString(n) + ' ' + units[0][0] + (if n == 1 then '' else 's'),

  // The diagnosis table's prose of a duration (thresholds.py): "30 s", "15 min".
  tableDuration(d)::
    local s = self.seconds(d);
    if s >= 60 && std.mod(s, 60) == 0 then self.g(s / 60) + ' min' else self.g(s) + ' s',

  // alerts/config.yaml's for_overrides and severity_overrides: a table row's
  // alert by its row key, any other alert by its name.
  override(overrides, key, default):: if std.objectHas(overrides, key) then overrides[key] else default,
}
