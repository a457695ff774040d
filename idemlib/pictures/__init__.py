"""The pictures: plots of runs, a run drawn as SVG frame by frame, and the step-through player.

Every lesson draws with these; topics may use them, the pattern's core never does.
Colours come from the Okabe-Ito palette and always carry a second cue (hatching,
markers, words), so a reader who cannot tell the colours apart loses nothing.
"""
