"""P:D capacity planner: prefill and decode group counts from the token distribution and measured capacity.

workload (what arrives) + profile (what one group can do) -> formula (analytic sizing) ->
sim (discrete-event check) -> plan (the smallest configuration meeting the SLO target).
"""
