from units import FACTORS


class UnknownUnit(ValueError):
    pass


def convert(value, src, dst):
    try:
        return value * FACTORS[src] / FACTORS[dst]
    except KeyError as e:
        raise UnknownUnit("unknown unit: %s" % e.args[0])
