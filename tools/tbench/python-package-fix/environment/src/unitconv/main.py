import sys
from unitconv.core import convert


def main(argv):
    value, src, dst = float(argv[0]), argv[1], argv[2]
    print(round(convert(value, src, dst), 3))


if __name__ == "__main__":
    main(sys.argv[1:])
